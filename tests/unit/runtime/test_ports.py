"""port_is_free: a listening socket keeps a port taken; the connections a closed server leaves in
TIME_WAIT keep it taken only for the strict test, not for a bind like the engines' servers make."""

from __future__ import annotations

import socket

from tuner.runtime.procgroup import port_is_free


def _server(port: int = 0) -> socket.socket:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn and vLLM bind
    srv.bind(("127.0.0.1", port))
    srv.listen()
    return srv


def test_a_listening_port_is_taken_either_way():
    srv = _server()
    port = srv.getsockname()[1]
    try:
        assert not port_is_free(port)
        assert not port_is_free(port, reuse_addr=True)
    finally:
        srv.close()


def test_time_wait_after_the_server_closed_its_connections_is_free_for_a_server():
    srv = _server()
    port = srv.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    conn.close()   # the server closes first, as a stopped engine does: TIME_WAIT is on its side
    assert client.recv(1) == b""
    client.close()
    srv.close()
    assert not port_is_free(port)   # the strict test still sees the lingering connection
    assert port_is_free(port, reuse_addr=True)
    _server(port).close()   # and a server binds it indeed
