"""`hookaudit serve`: the HTTP gateway that agents' http hooks POST to, on its own hardened
HTTP/1.1 server."""
