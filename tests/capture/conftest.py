from tests.capture.live_server import capture_server, server

__all__ = ["capture_server", "server"]
