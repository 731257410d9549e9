"""Is a Kafka broker answering? An ApiVersions request (Kafka's smallest: no body, any broker
answers it, authenticated or not) on one kept connection per broker, all brokers at once, each
answer awaited up to a deadline.

A TCP connect is no such probe: the kernel of a hung broker (SIGSTOP, a long GC pause, a stalled
disk) still completes the handshake. ApiVersions goes through the broker's request queue and its
handler threads, the same way a produce request does. A missed deadline closes the connection,
so a late answer never stands for the next round's.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping

_API_VERSIONS = 18
_CLIENT_ID = b"flashsale-probe"
_HEADER = struct.Struct(">ihhih")  # size, api key, api version 0, correlation id, client id length
_ANSWER = struct.Struct(">ii")  # size, correlation id
_LARGEST_ANSWER = 1 << 16  # ApiVersions lists ~90 APIs in ~500 bytes

Address = tuple[str, int]
_Link = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def api_versions_request(correlation: int) -> bytes:
    size = _HEADER.size - 4 + len(_CLIENT_ID)
    return _HEADER.pack(size, _API_VERSIONS, 0, correlation, len(_CLIENT_ID)) + _CLIENT_ID


class BrokerProbes:
    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._links: dict[Address, _Link] = {}
        self._correlation = 0

    async def ask(self, brokers: Mapping[int, Address]) -> dict[int, bool]:
        """Broker id → it answered within the deadline; the brokers asked at once."""
        for gone in self._links.keys() - set(brokers.values()):
            self._drop(gone)
        ids = list(brokers)
        answered = await asyncio.gather(*(self._answers(brokers[b]) for b in ids))
        return dict(zip(ids, answered, strict=True))

    async def _answers(self, address: Address) -> bool:
        self._correlation = correlation = (self._correlation + 1) & 0x7FFF_FFFF
        try:
            async with asyncio.timeout(self.deadline_s):
                link = self._links.get(address)
                if link is None:
                    link = self._links[address] = await asyncio.open_connection(*address)
                reader, writer = link
                writer.write(api_versions_request(correlation))
                size, echoed = _ANSWER.unpack(await reader.readexactly(_ANSWER.size))
                if echoed != correlation or not 4 <= size <= _LARGEST_ANSWER:
                    raise ConnectionError(f"answer {echoed} of {size} bytes to {correlation}")
                await reader.readexactly(size - 4)  # the version ranges: any answer will do
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            self._drop(address)
            return False
        return True

    def _drop(self, address: Address) -> None:
        link = self._links.pop(address, None)
        if link is not None:
            link[1].close()

    def close(self) -> None:
        for address in list(self._links):
            self._drop(address)
