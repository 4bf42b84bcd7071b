"""`kg serve` and `kg mcp`: kg for agents over HTTP and MCP, the tenant fixed by the credential.

- `keys`: API keys (one group, one role each), stored hashed in the store;
- `models`: the request models, shared by the HTTP API and the MCP tools;
- `service`: every operation, scoped to the caller's group and checked against its role;
- `app`: the HTTP API (FastAPI): its routers (`routes`, one per resource), the pieces in
  front of them, lifespan; `errors` its problem details, `openapi` its document;
- `mcp`: the MCP tools, over streamable HTTP at /mcp and over stdio;
- `metrics`: Prometheus metrics per route and tool, and each group's ingest and query metrics.

Needs the `serve` extra (`pip install 'kg[serve]'`).
"""
