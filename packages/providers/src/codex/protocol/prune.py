"""Prunes `codex app-server generate-json-schema --experimental` output to what Baton's Codex adapter speaks.

Usage: python3 prune.py SCHEMA_DIR > codex-app-server.subset.json
Keeps the request/response/notification/server-request definitions listed below and every definition they reference,
so a later Codex version's change to any of them shows up as a diff of the subset (test: CodexProtocol.test.ts).
"""
import json, sys

ROOT = sys.argv[1]
bundle = json.load(open(f"{ROOT}/codex_app_server_protocol.v2.schemas.json"))
defs = bundle["definitions"]
v1 = json.load(open(f"{ROOT}/codex_app_server_protocol.schemas.json"))["definitions"]

KEEP = [
    "InitializeParams", "InitializeResponse",
    "ThreadStartParams", "ThreadStartResponse", "ThreadResumeParams", "ThreadResumeResponse",
    "ThreadForkParams", "ThreadForkResponse", "TurnStartParams", "TurnStartResponse",
    "TurnInterruptParams", "TurnInterruptResponse", "ThreadInjectItemsParams", "ThreadInjectItemsResponse",
    "ThreadCompactStartParams", "ThreadCompactStartResponse", "ThreadReadParams", "ThreadReadResponse",
    "ThreadTokenUsageUpdatedNotification", "TurnStartedNotification", "TurnCompletedNotification",
    "ItemStartedNotification", "ItemCompletedNotification", "ErrorNotification", "AgentMessageDeltaNotification",
    "ContextCompactedNotification", "ThreadStartedNotification", "DynamicToolCallParams", "DynamicToolCallResponse",
]

def lookup(name):
    if name in defs: return defs[name]
    if name in v1: return v1[name]
    try:
        return json.load(open(f"{ROOT}/v2/{name}.json"))
    except FileNotFoundError:
        return json.load(open(f"{ROOT}/{name}.json"))

out = {}
def walk(o):
    if isinstance(o, dict):
        ref = o.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            o = {**o, "$ref": "#/definitions/" + ref[len("#/definitions/"):].removeprefix("v2/")}
            add(ref[len("#/definitions/"):].removeprefix("v2/"))
        for k, v in o.items():
            if k != "definitions": walk(v)
    elif isinstance(o, list):
        for v in o: walk(v)
def add(name):
    if name in out: return
    d = dict(lookup(name)); d.pop("definitions", None); d.pop("$schema", None)
    out[name] = d
    walk(d)
for n in KEEP: add(n)
# The method names of the requests, notifications and server requests used, as the bundle declares them.
methods = {}
for f in ["ClientRequest", "ServerNotification", "ServerRequest"]:
    for v in json.load(open(f"{ROOT}/{f}.json"))["oneOf"]:
        p = v["properties"]; m = p["method"]["enum"][0]
        ref = p.get("params", {}).get("$ref", "")
        name = ref.split("/")[-1]
        if name in KEEP: methods[m] = name
json.dump({"methods": dict(sorted(methods.items())), "definitions": dict(sorted(out.items()))}, sys.stdout, indent=1, sort_keys=True)
print()
