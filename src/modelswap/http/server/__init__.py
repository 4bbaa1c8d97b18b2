"""The aiohttp application and the listening socket: middleware order, connection caps, malformed
HTTP, signals and shutdown.
"""
