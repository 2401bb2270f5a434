"""The capture proxy at the edge: the Starlette app, the engine client, session stores,
the servers, and the proxy in this process."""
