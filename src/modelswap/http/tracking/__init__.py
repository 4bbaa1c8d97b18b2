"""What the gateway keeps about each request and client on both doors: the request scope
(observation, in-flight entry, drain count, cancel rules), the in-flight table, the drain, a
client's network and the throttle of failed keys."""
