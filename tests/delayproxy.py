"""A TCP proxy that delays every byte by a fixed time in each direction, as netem's delay would on a link.

    python -m tests.delayproxy --listen HOST --upstream HOST:PORT --delay-ms 100

Prints ``delayproxy ready: HOST:PORT`` (a free port) once it listens. Each direction forwards what it reads after
``--delay-ms`` (order kept, no bandwidth limit), so a request's round trip grows by twice the delay and nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import time


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Forward ``reader`` to ``writer``, each chunk ``delay_s`` after it was read."""
    queue: asyncio.Queue = asyncio.Queue()

    async def deliver() -> None:
        while (item := await queue.get()) is not None:
            due, data = item
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(data)
            await writer.drain()
        writer.close()  # after the last data: the end of the stream is delayed as much

    delivering = asyncio.create_task(deliver())
    try:
        while data := await reader.read(65536):
            await queue.put((time.monotonic() + delay_s, data))
    except ConnectionError:
        pass
    await queue.put(None)
    try:
        await delivering
    except ConnectionError:
        pass


async def serve(listen: str, upstream: str, delay_s: float) -> None:
    upstream_host, upstream_port = upstream.rsplit(":", 1)

    async def handle(client_reader, client_writer) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(upstream_host, int(upstream_port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer, delay_s), pipe(server_reader, client_writer, delay_s))

    server = await asyncio.start_server(handle, listen, 0)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"delayproxy ready: {host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", default="127.0.0.1")
    parser.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--delay-ms", type=float, required=True, help="Added to each direction")
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.upstream, args.delay_ms / 1000))


if __name__ == "__main__":
    main()
