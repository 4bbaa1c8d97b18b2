"""A tiny authoritative DNS server for tests: A and AAAA records from a JSON file, over UDP and
TCP on one loopback port (written to ``--port-file`` once it serves). Written from RFC 1035 on
its own (it shares no code with modelswap's DNS client, so each checks the other).

``--records FILE`` is read again for every question, so a test adds and removes records by
rewriting it: ``{"pool.test": ["127.0.0.2", "::1"], "broken.test": "SERVFAIL"}``. A name that
is not in the file is NXDOMAIN; a listed name without addresses of the asked type is an empty
NOERROR answer. A UDP answer larger than ``--udp-limit`` bytes (default: 512, or what the
question's EDNS0 record offers) is cut to the records that fit and flagged truncated (TC), so
the client must ask again over TCP. Every question is appended to ``--log`` as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import struct
from pathlib import Path
from typing import cast

TYPE_A, TYPE_AAAA, TYPE_OPT = 1, 28, 41
RCODE = {"NOERROR": 0, "SERVFAIL": 2, "NXDOMAIN": 3, "REFUSED": 5}


class Question:
    def __init__(self, data: bytes) -> None:
        self.ident, self.flags, _, _, _, arcount = struct.unpack_from("!HHHHHH", data)
        labels: list[str] = []
        offset = 12
        while data[offset]:
            length = data[offset]
            labels.append(data[offset + 1 : offset + 1 + length].decode("ascii").lower())
            offset += 1 + length
        self.name = ".".join(labels)
        self.qtype, self.qclass = struct.unpack_from("!HH", data, offset + 1)
        self.raw = data[12 : offset + 5]  # the question section, copied into the answer
        self.edns_size = 0
        if arcount and data[offset + 5] == 0:
            rtype, size = struct.unpack_from("!HH", data, offset + 6)
            if rtype == TYPE_OPT:
                self.edns_size = size


def records(path: Path, name: str) -> tuple[int, list[str]]:
    table = json.loads(path.read_text()) if path.exists() else {}
    entry = table.get(name)
    if entry is None:
        return RCODE["NXDOMAIN"], []
    if isinstance(entry, str):
        return RCODE[entry], []
    return RCODE["NOERROR"], list(entry)


def answer(question: Question, path: Path, limit: int | None) -> bytes:
    rcode, addresses = records(path, question.name)
    wanted = 4 if question.qtype == TYPE_A else 6 if question.qtype == TYPE_AAAA else 0
    rdatas = [
        ipaddress.ip_address(a).packed
        for a in addresses
        if ipaddress.ip_address(a).version == wanted
    ]
    body = b""
    count = 0
    truncated = False
    for rdata in rdatas:
        rr = struct.pack("!HHHIH", 0xC00C, question.qtype, 1, 5, len(rdata)) + rdata
        if limit is not None and 12 + len(question.raw) + len(body) + len(rr) > limit:
            truncated = True
            break
        body += rr
        count += 1
    flags = 0x8000 | 0x0400 | (question.flags & 0x0100) | 0x0080 | rcode  # QR AA RD RA
    if truncated:
        flags |= 0x0200
    header = struct.pack("!HHHHHH", question.ident, flags, 1, count, 0, 0)
    return header + question.raw + body


def log_question(log: Path | None, question: Question, transport: str) -> None:
    if log is not None:
        entry = {"name": question.name, "type": question.qtype, "transport": transport}
        with log.open("a") as out:
            out.write(json.dumps(entry) + "\n")


class Udp(asyncio.DatagramProtocol):
    def __init__(self, path: Path, log: Path | None, limit: int | None) -> None:
        self.path, self.log, self.limit = path, log, limit
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Python 3.11's selector transport does not derive from DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        question = Question(data)
        log_question(self.log, question, "udp")
        limit = self.limit or max(512, question.edns_size)
        assert self.transport is not None
        self.transport.sendto(answer(question, self.path, limit), addr)


def publish_port(path: Path, port: int) -> None:
    """Write the port where the test looks for it: whole, once both sockets serve."""
    path.with_suffix(".tmp").write_text(str(port))
    path.with_suffix(".tmp").rename(path)


async def serve(args: argparse.Namespace) -> None:
    path, log = Path(args.records), Path(args.log) if args.log else None

    async def tcp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (size,) = struct.unpack("!H", await reader.readexactly(2))
            question = Question(await reader.readexactly(size))
            log_question(log, question, "tcp")
            reply = answer(question, path, None)
            writer.write(struct.pack("!H", len(reply)) + reply)
            await writer.drain()
        finally:
            writer.close()

    loop = asyncio.get_running_loop()
    for _ in range(100):  # one port for both: a free UDP port whose TCP twin is free too
        udp, _ = await loop.create_datagram_endpoint(
            lambda: Udp(path, log, args.udp_limit), local_addr=(args.host, 0)
        )
        port = udp.get_extra_info("sockname")[1]
        try:
            server = await asyncio.start_server(tcp, args.host, port)
        except OSError:
            udp.close()
            continue
        break
    else:
        raise SystemExit("no port free for both UDP and TCP")
    publish_port(Path(args.port_file), port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port-file", required=True, help="where the chosen port is written")
    parser.add_argument("--records", required=True)
    parser.add_argument("--log")
    parser.add_argument("--udp-limit", type=int, default=None)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
