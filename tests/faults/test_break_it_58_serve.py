"""Break-it round 58, fixer G1: serve's KServe v2 requests: an output asked for many times, binary
tensors without their header, the statistics' failures, and a short body's header length.

T3 C1: `"outputs"` could name one output any number of times, and each copy was encoded into
the answer: a 1.1 MB request got a 10 MB answer, a 5.9 MB one ran the server out of its whole
address space (the body cap bounded nothing). Now an output named twice is refused with 400,
`output 'logits' is asked for twice`, as an input named twice is.
T3 C2: binary tensors sent without `Inference-Header-Content-Length` (a hand-written curl) were
answered "malformed request: Invalid JSON: trailing characters at line 1 column 116". Now: `the
body has 192 bytes after its JSON; binary tensors need the Inference-Header-Content-Length
header (the JSON's length in bytes)`.
T3 C3: the statistics' `fail` left out a compressed body refused with 415 and /predict's refused
query (`topk=0`, answered 400 before the handler ran): /metrics counted 3 refusals, `fail` 1.
Now every request to the model's infer and /predict routes counts, a success or a failure,
whatever refused it; a request for another model (404) is none of this model's.
T3 C4: a body shorter than a small header length was told "Inference-Header-Content-Length is 2
digits long but the body has only 3 bytes"; now "is 99 but ...", the digit count kept for a
number too long to show (over 20 digits).

`dlperf serve`'s app served on 127.0.0.1 (uvicorn in a thread), asked with httpx, and C1 once
more with tritonclient.http; C4's split on its own as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from dlperf.deploy.protocol import HEADER_LENGTH, split
from dlperf.deploy.server import create_app
from dlperf.errors import UserError
from tests.deploy.test_server import png, running, tiny_classifier

INFER = "/v2/models/tiny/infer"
ROWS = np.zeros((1, 3, 8, 8), np.float32)  # the tiny classifier's input, one row


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("bk58_serve") / "tiny.onnx")


@pytest.fixture(scope="module")
def url(tiny: Path) -> Iterator[str]:
    with running(create_app(tiny, threads=1)) as address:
        yield address


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=60) as c:
        yield c


def binary_request(outputs: list[dict[str, object]] | None = None) -> tuple[bytes, bytes]:
    """The JSON header of a one-row binary request and the whole body (header, then the row)."""
    doc: dict[str, object] = {
        "inputs": [
            {
                "name": "input",
                "shape": list(ROWS.shape),
                "datatype": "FP32",
                "parameters": {"binary_data_size": ROWS.nbytes},
            }
        ]
    }
    if outputs is not None:
        doc["outputs"] = outputs
    header = json.dumps(doc).encode()
    return header, header + ROWS.tobytes()


# --- C1: an output named twice ---------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_an_output_named_twice_is_refused(client: httpx.Client, binary: bool) -> None:
    """Before: 200 with the output encoded twice (20,000 times: a 10 MB answer)."""
    header, body = binary_request([{"name": "logits", "parameters": {"binary_data": binary}}] * 3)
    r = client.post(INFER, content=body, headers={HEADER_LENGTH: str(len(header))})
    assert (r.status_code, r.json()) == (400, {"error": "output 'logits' is asked for twice"})


def test_an_output_named_once_is_still_answered_once(client: httpx.Client) -> None:
    header, body = binary_request([{"name": "logits"}])
    r = client.post(INFER, content=body, headers={HEADER_LENGTH: str(len(header))})
    assert r.status_code == 200, r.text
    assert [o["name"] for o in r.json()["outputs"]] == ["logits"]


def test_tritonclient_asking_for_an_output_twice_hears_why(url: str) -> None:
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    given = triton.InferInput("input", list(ROWS.shape), "FP32")
    given.set_data_from_numpy(ROWS)
    wanted = [triton.InferRequestedOutput("logits", binary_data=True)] * 2
    try:
        with pytest.raises(InferenceServerException, match="output 'logits' is asked for twice"):
            client.infer("tiny", [given], outputs=wanted)
    finally:
        client.close()


# --- C2: binary tensors without Inference-Header-Content-Length ------------------------------


def test_binary_tensors_without_the_header_length_are_told_so(client: httpx.Client) -> None:
    """Before: "malformed request: Invalid JSON: trailing characters at line 1 column 105"."""
    _, body = binary_request()
    r = client.post(INFER, content=body, headers={"content-type": "application/octet-stream"})
    assert r.status_code == 400
    assert r.json() == {
        "error": f"the body has {ROWS.nbytes} bytes after its JSON; binary tensors need the "
        f"{HEADER_LENGTH} header (the JSON's length in bytes)"
    }


def test_binary_data_starting_with_white_space_is_counted_whole(client: httpx.Client) -> None:
    """The JSON parser reports the first byte after the JSON that is not white space: the
    count is from the JSON's end all the same."""
    header, _ = binary_request()
    body = header + b" \n\t\r" + b"\x00" * (ROWS.nbytes - 4)
    r = client.post(INFER, content=body)
    assert r.json()["error"].startswith(f"the body has {ROWS.nbytes} bytes after its JSON;")


def test_a_header_length_past_the_json_is_told_so(client: httpx.Client) -> None:
    header, body = binary_request()
    given = len(header) + 8
    r = client.post(INFER, content=body, headers={HEADER_LENGTH: str(given)})
    assert r.status_code == 400
    assert r.json() == {
        "error": f"{HEADER_LENGTH} is {given} but the JSON is {len(header)} bytes long; it "
        "gives the JSON's length in bytes"
    }


def test_json_followed_by_white_space_alone_is_still_answered(client: httpx.Client) -> None:
    doc = {"inputs": [{"name": "input", "shape": [1, 3, 8, 8], "datatype": "FP32"}]}
    doc["inputs"][0]["data"] = [0.0] * 192
    r = client.post(INFER, content=json.dumps(doc).encode() + b"\n\n")
    assert r.status_code == 200, r.text


# --- C3: every refusal is a failure in the statistics ----------------------------------------


def fails(client: httpx.Client) -> int:
    doc = client.get("/v2/models/tiny/stats").json()
    count: int = doc["model_stats"][0]["inference_stats"]["fail"]["count"]
    return count


def refused(client: httpx.Client, route: str) -> float:
    """The 4xx answers /metrics counted on `route`."""
    families = text_string_to_metric_families(client.get("/metrics").text)
    return sum(
        sample.value
        for family in families
        for sample in family.samples
        if sample.name == "dlperf_requests_total"
        and sample.labels["route"] == route
        and sample.labels["status"].startswith("4")
    )


def test_every_refused_request_is_a_failure_as_metrics_count_it(client: httpx.Client) -> None:
    """Before: fail +1 (the bad JSON) for 3 refusals: the 415 and the query refused before the
    handler ran were not counted."""
    routes = ("/v2/models/{name}/infer", "/predict")
    before = fails(client), [refused(client, route) for route in routes]
    gzip = client.post(INFER, content=b"{}", headers={"content-encoding": "gzip"})
    topk = client.post("/predict?topk=0", content=png())
    bad = client.post(INFER, content=b"{}")
    plain = client.post("/predict?topk=abc", content=png())
    assert [r.status_code for r in (gzip, topk, bad, plain)] == [415, 400, 400, 400]
    assert fails(client) == before[0] + 4
    assert [refused(client, route) for route in routes] == [n + 2 for n in before[1]]


def test_a_request_for_another_model_is_not_this_ones(client: httpx.Client) -> None:
    before = fails(client)
    r = client.post("/v2/models/other/infer", content=b"{}")
    assert r.status_code == 404
    assert fails(client) == before


def test_a_success_is_still_a_success_with_its_phases(client: httpx.Client) -> None:
    doc = client.get("/v2/models/tiny/stats").json()["model_stats"][0]["inference_stats"]
    r = client.post("/predict?topk=2", content=png())
    assert r.status_code == 200, r.text
    assert len(r.json()["predictions"]) == 2
    after = client.get("/v2/models/tiny/stats").json()["model_stats"][0]["inference_stats"]
    assert after["success"]["count"] == doc["success"]["count"] + 1
    assert after["fail"] == doc["fail"]
    assert after["compute_infer"]["count"] == doc["compute_infer"]["count"] + 1


# --- C4: a body shorter than a small header length -------------------------------------------


@pytest.mark.parametrize(
    ("length", "said"),
    [
        ("99", "is 99 but the body has only 3 bytes"),
        ("0099", "is 99 but the body has only 3 bytes"),
        ("9" * 20, f"is {'9' * 20} but the body has only 3 bytes"),
        ("9" * 21, "is 21 digits long but the body has only 3 bytes"),
        ("9" * 5000, "is 5000 digits long but the body has only 3 bytes"),
    ],
)
def test_a_header_length_past_the_body_is_shown_unless_too_long(length: str, said: str) -> None:
    """Before: "is 2 digits long" for 99 (any value with more digits than the body's size)."""
    with pytest.raises(UserError) as e:
        split(b"abc", length)
    assert str(e.value) == f"{HEADER_LENGTH} {said}"


def test_a_short_body_is_told_the_header_length_it_was_sent(client: httpx.Client) -> None:
    r = client.post(INFER, content=b"abc", headers={HEADER_LENGTH: "99"})
    assert (r.status_code, r.json()) == (
        400,
        {"error": f"{HEADER_LENGTH} is 99 but the body has only 3 bytes"},
    )


@pytest.mark.parametrize("short", [1, 40])
def test_a_header_length_inside_the_json_is_told_so(client: httpx.Client, short: int) -> None:
    """Round 60 (round 58's Left): it was the parser's "malformed request: Invalid JSON: EOF
    while parsing a string at line 1 column 40", the JSON blamed."""
    header, body = binary_request()
    given = len(header) - short
    r = client.post(INFER, content=body, headers={HEADER_LENGTH: str(given)})
    assert r.status_code == 400
    assert r.json() == {
        "error": f"{HEADER_LENGTH} is {given} but the JSON is {len(header)} bytes long; it "
        "gives the JSON's length in bytes"
    }
