"""The idle keep-alive race, reproduced: a server that closes a kept-alive connection at exactly
the moment the client reuses it (it reads the next request, then closes without an answer: a
FIN, or a reset as a server's idle timer firing under the write gives). The demo's buyers
(flashsale/room_buyers.py over flashsale/http_retry.py) resend on a fresh connection."""

from __future__ import annotations

import asyncio
import socket
import struct

import aiohttp
import pytest

from flashsale.room_buyers import RoomClient
from kernel.settings import settings

ANSWER = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n{"n": 1}'


class RacingServer:
    """Answers the first request of each connection, then drops the connection as its second
    request arrives (only on the first connection: a fresh one is served normally)."""

    def __init__(self, reset: bool) -> None:
        self.reset = reset
        self.connections = 0
        self.dropped = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        first_connection = self.connections == 1
        served = 0
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                if served and first_connection:
                    self.dropped += 1
                    if self.reset:
                        sock = writer.get_extra_info("socket")
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                    writer.close()
                    return
                writer.write(ANSWER)
                await writer.drain()
                served += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
async def test_a_buyer_resends_when_its_kept_alive_connection_is_closed_under_it(
    reset: bool,
) -> None:
    racing = RacingServer(reset)
    server = await asyncio.start_server(racing.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connector = aiohttp.TCPConnector(limit=1)  # one connection: the second request reuses it
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", connector=connector) as s:
            client = RoomClient(s, settings(), sale=1, item=1)
            # POST, as a join or a purchase: aiohttp itself resends only GET-like methods.
            first = await client.send("POST", "/api/flash-sales/sales/1/queue", {})
            second = await client.send("POST", "/api/flash-sales/sales/1/queue", {})
    finally:
        server.close()
        await server.wait_closed()
    assert first == second == (200, {"n": 1}, 0)
    assert racing.dropped == 1  # the race happened: the reused connection was dropped
    assert racing.connections == 2  # and the resend went out on a fresh one
