"""The 503 of a start that ran out of memory (issue 39): the OpenAI error shape as before, the
load dry run added as ``error.prediction`` (in Anthropic's shape, under ``details``), secrets
masked in it like everywhere else."""

from __future__ import annotations

import json

from modelswap.errors import Diagnosis, StartError
from modelswap.http.error_responses import anthropic_envelope, response_for
from modelswap.redact import Redactor

SECRET = "sk-planted-secret-0123456789"


def failed(prediction: dict[str, object] | None) -> StartError:
    error = StartError("big", Diagnosis("cuda_oom", "the GPU ran out of memory.", fix="smaller"))
    error.prediction = prediction
    return error


def body(error: StartError) -> dict[str, object]:
    response = response_for(error, Redactor([SECRET]))
    assert response.status == 503
    assert isinstance(response.body, bytes)
    data: dict[str, object] = json.loads(response.body)
    return data


def test_the_prediction_rides_in_the_openai_error() -> None:
    prediction = {"model": "big", "fits_machine": {"fits": False, "fixes": ["-c 4096"]}}
    data = body(failed(prediction))
    error = data["error"]
    assert isinstance(error, dict)
    assert (error["type"], error["code"]) == ("service_unavailable", "cuda_oom")
    assert error["diagnosis"]["code"] == "cuda_oom"
    assert error["prediction"] == prediction
    details = anthropic_envelope(data, 503)["error"]
    assert isinstance(details, dict)
    assert details["details"]["prediction"] == prediction


def test_without_a_prediction_the_error_is_as_before() -> None:
    error = body(failed(None))["error"]
    assert isinstance(error, dict)
    assert "prediction" not in error


def test_a_secret_in_the_prediction_is_masked() -> None:
    data = body(failed({"summary": f"cmd --api-key {SECRET}"}))
    assert SECRET not in json.dumps(data)
