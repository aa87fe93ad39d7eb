"""The OpenAPI 3.1 document served at ``/openapi.json``, written out in code.

One operation per entry of :data:`hopmem.server.routes.ROUTES`, in both the
legacy and the ``/db/{db}`` form; request and response schemas below. A test
checks that every route has its operation here.
"""

from __future__ import annotations

from typing import Any

from .models import DB_NAME, MAX_COLLECTION_NAME, Limits

__all__ = ["build_openapi"]

_DB_NAME_PATTERN = f"^{DB_NAME.pattern}$"  # the store's rule, anchored as JSON Schema wants

NUMBER = {"type": "number"}
INTEGER = {"type": "integer"}
VECTOR = {"type": "array", "items": NUMBER, "minItems": 1,
          "description": "A vector of the database's dimension (finite numbers)."}
STRATEGY = {"type": "string", "enum": ["iterative", "fast"], "default": "iterative"}
ANY_JSON: dict[str, Any] = {"description": "Any JSON value."}

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}
STATUS_OK = {"type": "object", "required": ["status"],
             "properties": {"status": {"type": "string", "enum": ["ok"]}}}

ACTIVATED = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["id", "similarity", "weight"],
        "properties": {"id": INTEGER, "similarity": NUMBER, "weight": NUMBER},
    },
}

TRACE = {
    "type": "object",
    "required": ["iterations", "converged", "activated_locations", "result", "fidelity",
                 "first_contact"],
    "properties": {
        "iterations": INTEGER,
        "converged": {"type": "boolean"},
        "activated_locations": ACTIVATED,
        "result": {"type": "array", "items": NUMBER},
        "fidelity": {"type": "number",
                     "description": "cos(query, result) for the strategy used (addition)."},
        "first_contact": {"type": "number",
                          "description": "cos(query, one-step read): what gates calibrate on "
                                         "(addition)."},
    },
}

DATABASE_INFO = {
    "type": "object",
    "required": ["name", "dimension"],
    "properties": {
        "name": {"type": "string"},
        "created_at": {"type": ["number", "string", "null"]},
        "dimension": INTEGER,
        "collections": {"description": "The database's collections."},
    },
}

CONFIG_FIELDS = {
    "mode": {"type": "string", "enum": ["competitive", "plain"]},
    "k": {"type": "integer", "minimum": 1},
    "beta": {"type": "number", "exclusiveMinimum": 0},
    "t_max": {"type": "integer", "minimum": 1},
    "epsilon": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
    "eta0": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "eta_decay": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "eta_min": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "tau_split": {"type": "number", "minimum": 0, "maximum": 1},
    "tau_merge": {"type": "number", "minimum": 0, "maximum": 1},
    "tau_overload": {"type": ["number", "null"], "exclusiveMinimum": 0},
    "gamma": {"type": "number", "minimum": 0},
    "tau_damp": {"type": "number", "exclusiveMinimum": 0},
    "max_locations": {"type": ["integer", "null"], "minimum": 1},
    "seed": {"type": "integer", "minimum": 0},
}


def _obj(required: list[str], properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    out.update(extra)
    return out


def _operations(limits: Limits) -> dict[str, dict[str, Any]]:
    batch = limits.max_batch
    vectors = {"type": "array", "items": VECTOR, "minItems": 1, "maxItems": batch}
    doc = _obj(["id", "metadata"], {"id": INTEGER, "metadata": ANY_JSON})
    write_id = {"type": "string", "minLength": 1, "maxLength": 256,
                "description": "Optional client-chosen id of this change, unique in the "
                               "collection: a repeat with the same id and payload answers the "
                               "first answer without applying it again; with another payload "
                               "it is 400."}
    return {
        "health": {"summary": "Liveness", "response": STATUS_OK},
        "ready": {"summary": "Readiness: 503 when storage is unusable or shutting down",
                  "response": STATUS_OK, "errors": [503]},
        "openapi": {"summary": "This document", "response": {"type": "object"}},
        "list_databases": {
            "summary": "List databases (a scoped key sees only its own)",
            "response": _obj(["databases"], {"databases": {"type": "array",
                                                           "items": DATABASE_INFO}}),
        },
        "create_database": {
            "summary": "Create a database (needs a key for all databases)",
            "request": _obj(["name", "dimension"], {
                "name": {"type": "string", "pattern": _DB_NAME_PATTERN},
                "dimension": {"type": "integer", "minimum": 1, "maximum": 65536},
                "encoder": {"type": ["string", "null"], "enum": ["hashing", "minilm", None],
                            "description": "Text encoder recorded for the text routes."},
                **CONFIG_FIELDS}),
            "response": DATABASE_INFO, "errors": [400, 409],
        },
        "get_database": {"summary": "A database's info", "response": DATABASE_INFO,
                         "errors": [404]},
        "drop_database": {
            "summary": "Drop a database ('default' cannot be dropped: 403)",
            "response": _obj(["dropped"], {"dropped": {"type": "boolean"}}),
        },
        "list_collections": {
            "summary": "List collections",
            "response": _obj(["collections"], {"collections": {"type": "array",
                                                               "items": {"type": "string"}}}),
        },
        "create_collection": {
            "summary": "Create a collection (no-op if it exists)",
            "request": _obj(["name"], {"name": {"type": "string", "minLength": 1,
                                                "maxLength": MAX_COLLECTION_NAME},
                                       "partitions": {"type": "integer", "minimum": 1,
                                                      "description": "P > 1 spreads the collection "
                                                      "over P parts (hopmem serve --ray only)"}}),
            "response": _obj(["name", "created"], {"name": {"type": "string"},
                                                   "created": {"type": "boolean"}}),
        },
        "drop_collection": {
            "summary": "Drop a collection",
            "response": _obj(["dropped"], {"dropped": {"type": "boolean"}}),
        },
        "write": {
            "summary": "Write vectors (atomic); with metadata each vector also becomes a "
                       "document. Without metadata no document is created and none can be "
                       "added later. Creates the collection if missing.",
            "request": _obj(["vectors"], {
                "vectors": vectors,
                "metadata": {"type": "array", "items": ANY_JSON,
                             "description": "One JSON value per vector."},
                "write_id": write_id}),
            "response": _obj(["count"], {"count": INTEGER,
                                         "ids": {"type": "array", "items": INTEGER}}),
        },
        "read": {
            "summary": "Reconstruct from a query (creates the collection if missing; reading "
                       "an empty memory is 400)",
            "request": _obj(["query"], {"query": VECTOR, "strategy": STRATEGY}),
            "response": _obj(["result", "fidelity", "first_contact"], {
                "result": {"type": "array", "items": NUMBER},
                "fidelity": NUMBER, "first_contact": NUMBER}),
        },
        "analyze": {
            "summary": "A read with its trace",
            "request": _obj(["query"], {"query": VECTOR, "strategy": STRATEGY}),
            "response": TRACE,
        },
        "batch_analyze": {
            "summary": f"Analyze up to {batch} queries",
            "request": _obj(["queries"], {"queries": vectors, "strategy": STRATEGY}),
            "response": _obj(["results"], {"results": {"type": "array", "items": TRACE}}),
        },
        "attention": {
            "summary": "Softmax attention over the activated locations",
            "request": _obj(["query"], {"query": VECTOR, "scale": {
                "type": "number", "description": "Defaults to the collection's beta."}}),
            "response": _obj(["result", "beta", "contributors"], {
                "result": {"type": "array", "items": NUMBER}, "beta": NUMBER,
                "contributors": ACTIVATED}),
        },
        "stats": {
            "summary": "Statistics; 404 if the collection does not exist (does not create)",
            "response": _obj(
                ["num_locations", "total_writes", "current_eta", "avg_write_count",
                 "max_write_count", "writes", "documents"],
                {"num_locations": INTEGER,
                 "total_writes": {"type": "number",
                                  "description": "HeatherDB's name: the sum of location weights"},
                 "current_eta": NUMBER, "avg_write_count": NUMBER, "max_write_count": NUMBER,
                 "writes": {"type": "integer", "description": "Vectors written (addition)"},
                 "documents": {"type": "integer",
                               "description": "Documents stored (addition)"}}),
            "errors": [404],
        },
        "config": {
            "summary": "The collection's configuration",
            "response": _obj(["config"], {"config": {"type": "object"}}), "errors": [404],
        },
        "fingerprint": {
            "summary": "The memory's fingerprint (null when empty)",
            "response": _obj(["fingerprint"], {"fingerprint": {
                "anyOf": [{"type": "array", "items": NUMBER}, {"type": "null"}]}}),
            "errors": [404],
        },
        "locations": {
            "summary": "The hard locations; full=true adds address and counter",
            "parameters": [{"name": "full", "in": "query", "required": False,
                            "schema": {"type": "boolean"}}],
            "response": _obj(["locations"], {"locations": {"type": "array", "items": _obj(
                ["id", "write_count"], {"id": INTEGER, "write_count": NUMBER,
                                        "address": {"type": "array", "items": NUMBER},
                                        "counter": {"type": "array", "items": NUMBER}})}}),
            "errors": [404],
        },
        "compress": {
            "summary": "Merge near-duplicate locations, then enforce max_locations",
            "request": _obj([], {"max_locations": {"type": "integer", "minimum": 1},
                                 "write_id": write_id}),
            "request_optional": True,
            "response": _obj(["locations_before", "locations_after", "merges"], {
                "locations_before": INTEGER, "locations_after": INTEGER,
                "merges": {"type": "integer", "description": "Number of merges"}}),
            "errors": [404],
        },
        "list_documents": {
            "summary": "List documents by id",
            "parameters": [
                {"name": "offset", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 0, "default": 0}},
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": batch,
                            "default": 100}}],
            "response": _obj(["documents"], {"documents": {"type": "array", "items": doc}}),
            "errors": [404],
        },
        "query_documents": {
            "summary": "Documents nearest a vector (creates the collection if missing)",
            "request": _obj(["query"], {
                "query": VECTOR, "n": {"type": "integer", "minimum": 1, "maximum": batch,
                                       "default": 10},
                "mode": {"type": "string", "enum": ["indexed", "exact"],
                         "default": "indexed"}}),
            "response": _obj(["results"], {"results": {"type": "array", "items": _obj(
                ["id", "similarity", "metadata"],
                {"id": INTEGER, "similarity": NUMBER, "metadata": ANY_JSON})}}),
        },
        "get_document": {"summary": "One document", "response": doc, "errors": [404],
                         "doc_id": True},
        "delete_document": {
            "summary": "Delete a document (idempotent; its contribution to the memory stays)",
            "parameters": [{"name": "write_id", "in": "query", "required": False,
                            "schema": write_id}],
            "response": _obj(["deleted"], {"deleted": {"type": "boolean"}}),
            "errors": [404], "doc_id": True,
        },
        "remember": {
            "summary": "Encode texts with the database's encoder and centering, then write "
                       "them as documents (400 if the database has no encoder)",
            "request": _obj(["texts"], {
                "texts": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                          "maxItems": batch},
                "metadata": {"type": "array", "items": ANY_JSON},
                "write_id": write_id}),
            "response": _obj(["ids"], {"ids": {"type": "array", "items": INTEGER}}),
        },
        "recall": {
            "summary": "Recall texts for a text query, with fidelity and a calibrated "
                       "abstention verdict",
            "request": _obj(["text"], {"text": {"type": "string"},
                                       "n": {"type": "integer", "minimum": 1,
                                             "maximum": batch, "default": 5}}),
            "response": _obj(["fidelity", "first_contact", "hits", "abstained"], {
                "fidelity": NUMBER, "first_contact": NUMBER,
                "hits": {"type": "array", "items": _obj(
                    ["id", "text"], {"id": INTEGER, "text": {"type": "string"},
                                     "metadata": ANY_JSON, "confidence": NUMBER,
                                     "band": {"type": ["string", "null"]}})},
                "abstained": {"type": "boolean"},
                "reason": {"type": ["string", "null"]}}),
        },
        "calibrate": {
            "summary": "Derive the abstention gate from related and unrelated texts",
            "request": _obj(["related", "unrelated"], {
                "related": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                            "maxItems": batch},
                "unrelated": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                              "maxItems": batch},
                "error_budget": {"type": "number", "minimum": 0, "maximum": 1}}),
            "response": {"type": "object", "description": "The gate: tau, bands and figures."},
        },
    }


_STATUS_TEXT = {400: "Bad request", 401: "Missing or invalid API key",
                403: "Key out of scope", 404: "Not found", 408: "Timed out reading the body",
                409: "Conflict", 413: "Body too large", 503: "Unavailable or timed out"}


def build_openapi(limits: Limits, version: str | None = None) -> dict[str, Any]:
    """The document; ``version`` defaults to hopmem's own."""
    from hopmem import __version__

    from .routes import ROUTES

    if version is None:
        version = __version__

    ops = _operations(limits)
    paths: dict[str, dict[str, Any]] = {}
    db_param = {"name": "db", "in": "path", "required": True,
                "schema": {"type": "string", "pattern": _DB_NAME_PATTERN}}
    c_param = {"name": "c", "in": "path", "required": True,
               "schema": {"type": "string", "minLength": 1, "maxLength": MAX_COLLECTION_NAME}}
    id_param = {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
    for spec in ROUTES:
        op = ops[spec.name]
        forms = [(spec.path, False)]
        if spec.scoped:
            forms.append(("/db/{db}" + spec.path, True))
        for path, scoped in forms:
            params: list[dict[str, Any]] = []
            if scoped or "{db}" in path:
                params.append(db_param)
            if "{c}" in path:
                params.append(c_param)
            if "{id}" in path:
                params.append(id_param)
            params.extend(op.get("parameters", []))
            responses: dict[str, Any] = {
                "200": {"description": "OK",
                        "content": {"application/json": {"schema": op["response"]}}}}
            codes = set(op.get("errors", []))
            if spec.access != "public":
                codes |= {400, 401, 403, 404, 503}
                if "request" in op:
                    codes |= {408, 413}
            elif scoped:
                codes |= {400, 404}
            if spec.name == "ready":
                codes |= {503}
            for code in sorted(codes):
                responses[str(code)] = {
                    "description": _STATUS_TEXT[code],
                    "content": {"application/json": {"schema": ERROR}}}
            operation: dict[str, Any] = {
                "operationId": ("db_" if scoped else "") + spec.name
                + ("_" + path.rsplit("/", 1)[-1] if spec.name in ("health", "ready") else ""),
                "summary": op["summary"],
                "responses": responses,
            }
            if params:
                operation["parameters"] = params
            if "request" in op:
                operation["requestBody"] = {
                    "required": not op.get("request_optional", False),
                    "content": {"application/json": {"schema": op["request"]}}}
            if spec.access != "public":
                operation["security"] = [{"bearer": []}, {"apiKey": []}, {}]
            paths.setdefault(path, {})[spec.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "hopmem",
            "version": version,
            "description": "HeatherDB-compatible HTTP API of hopmem, plus additions "
                           "(fidelity, first_contact, writes, documents, text routes). "
                           "Every collection route exists in the legacy form (database "
                           "'default') and under /db/{db}. Errors are {\"error\": message}.",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
            "schemas": {"Error": ERROR, "Trace": TRACE, "DatabaseInfo": DATABASE_INFO},
        },
    }
