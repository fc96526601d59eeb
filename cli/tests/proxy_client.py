"""The official Python MCP SDK (`pip install mcp`) as the client of `idemkit proxy`.

    python proxy_client.py IDEMKIT CONFIG UPSTREAM_CMD ARGS...

Starts `IDEMKIT proxy --config CONFIG -- UPSTREAM_CMD ARGS...` over stdio, lists its tools,
reads a balance, charges the same invoice twice (a fault queued at the upstream may make the first
one's answer lost), charges another invoice twice, and prints what it got as one JSON object on
stdout, each result as it came over the wire. cli/tests/proxy.rs runs it and counts the effects at
the upstream.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def wire(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def main():
    idemkit, config, *upstream = sys.argv[1:]
    server = StdioServerParameters(
        command=idemkit,
        args=["proxy", "--config", config, "--", *upstream],
        # The SDK passes only a few variables by default; the upstream needs the test's.
        env=dict(os.environ),
    )
    out = {}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            out["tools"] = [wire(t) for t in listed.tools]
            out["balance"] = wire(await session.call_tool("balance", {"customer_id": "cus_py"}))
            lost = {"customer_id": "cus_py", "invoice": "inv_lost", "cents": 4200}
            out["lost"] = [wire(await session.call_tool("charge", lost)) for _ in range(2)]
            ok = {"customer_id": "cus_py", "invoice": "inv_ok", "cents": 100}
            out["ok"] = [wire(await session.call_tool("charge", ok)) for _ in range(2)]
    print(json.dumps(out))


asyncio.run(main())
