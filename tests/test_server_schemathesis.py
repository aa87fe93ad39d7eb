"""Schemathesis against /openapi.json: generated requests for every operation, no 5xx.

Bounded: a few examples per operation (``HOPMEM_FUZZ_EXAMPLES``, default 8).
Besides "no server error", responses must use documented status codes, JSON,
and match their documented schema.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("starlette")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from hopmem.server.app import create_app  # noqa: E402
from hopmem.server.models import Limits  # noqa: E402

EXAMPLES = int(os.environ.get("HOPMEM_FUZZ_EXAMPLES", "8"))
D = 4


def _app():
    root = tempfile.mkdtemp(prefix="hopmem-fuzz-")
    atexit.register(shutil.rmtree, root, True)
    app = create_app(os.path.join(root, "data"), D,
                     limits=Limits(max_body_bytes=64 * 1024, max_batch=16, request_timeout=10.0))
    # A second database and collections with content, so generated requests reach the engine.
    from starlette.testclient import TestClient
    client = TestClient(app)
    client.post("/db", json={"name": "agents", "dimension": D})
    for prefix in ("", "/db/agents"):
        client.post(f"{prefix}/collections/c/write",
                    json={"vectors": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1]],
                          "metadata": [{"a": 1}, None, "x"]})
    return app


# Built at import: schemathesis' lazy fixture loader does not run under this pytest.
schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@schema.parametrize()
@settings(max_examples=EXAMPLES,  # HOPMEM_FUZZ_EXAMPLES: each example is a request
          suppress_health_check=list(HealthCheck))  # schemathesis' strategies, not ours
def test_api_never_5xx_and_matches_its_schema(case):
    case.call_and_validate(checks=[not_a_server_error, status_code_conformance,
                                   content_type_conformance, response_schema_conformance])
