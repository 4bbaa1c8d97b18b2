"""What every request passes through before a route: authentication and its throttle, CORS,
observation, the shutdown drain.
"""
