"""The shared protocol types and the per-chunk plumbing."""

from __future__ import annotations

import httpx
import pytest

import loraplex.serving.engines as engines
from loraplex.serving.engines import (
    EngineDriver,
    GenerateRequest,
    SglangDriver,
    VllmDriver,
    make_driver,
)
from loraplex.serving.engines.http_driver import iter_sse_data, samples_named, sum_samples


def test_public_surface_is_exactly_all():
    public = {name for name in dir(engines) if not name.startswith("_")}
    modules = {
        "cli",
        "engine_env",
        "facts_check",
        "http_driver",
        "launch_sglang",
        "launch_vllm",
        "launcher",
        "openai_wire",
        "priority",
        "protocol",
        "recipes",
        "reported_facts",
        "sglang",
        "sglang_cpu",
        "sglang_fanout",
        "sglang_native",
        "streams",
        "vllm",
    }
    assert public - modules - {"annotations", "Any", "DRIVERS"} == set(engines.__all__)


def test_a_request_must_be_chat_or_completion_not_both():
    with pytest.raises(ValueError):
        GenerateRequest(rid="r")
    with pytest.raises(ValueError):
        GenerateRequest(rid="r", prompt="x", messages=[{"role": "user", "content": "x"}])


def test_drivers_satisfy_the_protocol():
    assert isinstance(VllmDriver("http://e"), EngineDriver)
    assert isinstance(SglangDriver("http://e"), EngineDriver)


def test_make_driver_picks_by_kind_and_refuses_unknown_kinds():
    assert isinstance(make_driver("sglang", "http://e", base_model="b"), SglangDriver)
    with pytest.raises(ValueError, match="unknown engine kind"):
        make_driver("tgi", "http://e")


async def test_sse_events_split_across_network_reads_are_joined():
    blocks = [b'data: {"a"', b": 1}\n\nda", b"ta: [DONE]\n\n"]

    async def body():
        for block in blocks:
            yield block

    response = httpx.Response(200, content=body())
    assert [data async for data in iter_sse_data(response.aiter_bytes())] == [
        b'{"a": 1}',
        b"[DONE]",
    ]


async def test_sse_comments_and_blank_lines_are_skipped():
    response = httpx.Response(200, content=b": ping\n\nevent: x\ndata: 1\r\n\r\n")
    assert [data async for data in iter_sse_data(response.aiter_bytes())] == [b"1"]


def test_the_named_samples_read_alone_match_a_full_parse():
    text = (
        "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="a b}",engine="0"} 2.0\n'
        'vllm:num_requests_running{model_name="c",engine="1"} 3.0\n'
        "vllm:num_requests_running_total 99.0\n"
        'vllm:num_requests_waiting{model_name="a"} 1.0 1700000000000\n'
        'ttft_bucket{le="0.1"} 1.0\n'
    )
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    full = sum_samples(text)
    assert (
        samples_named(text, names)
        == {name: full[name] for name in names}
        == {
            "vllm:num_requests_running": 5.0,
            "vllm:num_requests_waiting": 1.0,
        }
    )


def test_histogram_buckets_are_left_out_of_metrics():
    text = '# TYPE ttft histogram\nttft_bucket{le="0.1"} 1.0\nttft_count 4.0\nttft_sum 0.5\n'
    assert sum_samples(text) == {"ttft_count": 4.0, "ttft_sum": 0.5}
