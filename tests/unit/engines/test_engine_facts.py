"""An engine's registration is held against what the engine reports about itself."""

from __future__ import annotations

import httpx
import pytest

from loraplex.serving.engines.facts_check import Claim, claim_problems, problems
from loraplex.serving.engines.reported_facts import (
    MAX_ANSWER_BYTES,
    EngineSilent,
    ReportedFacts,
    read_reported_facts,
)

SGLANG_INFO = {
    "enable_lora": True, "max_lora_rank": 64, "max_loras_per_batch": 4,
    "max_loaded_loras": 8, "served_model_name": "loraplex-tiny", "version": "0.5.23",
    "model_path": "/models/loraplex-tiny",
}  # fmt: skip
VLLM_METRICS = (
    "# TYPE vllm:lora_requests_info gauge\n"
    'vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.7e9\n'
)


def engine(routes: dict[str, httpx.Response]) -> httpx.AsyncClient:
    """A client whose engine answers `routes` and 404 to anything else."""

    def answer(request: httpx.Request) -> httpx.Response:
        return routes.get(request.url.path, httpx.Response(404, json={"detail": "Not Found"}))

    return httpx.AsyncClient(base_url="http://engine", transport=httpx.MockTransport(answer))


async def test_sglang_reports_its_launch_arguments() -> None:
    async with engine({"/server_info": httpx.Response(200, json=SGLANG_INFO)}) as client:
        facts = await read_reported_facts(client, 1.0)
    assert facts == ReportedFacts(
        kind="sglang", lora_enabled=True, max_lora_rank=64, gpu_slots=4, host_slots=8,
        served_models=("loraplex-tiny",), model_folders=("loraplex-tiny",),
    )  # fmt: skip


async def test_vllm_reports_its_kind_model_and_gpu_slots() -> None:
    cards = [
        {"id": "loraplex-tiny", "root": "/srv/var/models/loraplex-tiny/", "parent": None},
        {"id": "lpx-0190", "root": "/cache/lpx-0190", "parent": "loraplex-tiny"},  # an adapter
    ]
    routes = {
        "/v1/models": httpx.Response(200, json={"object": "list", "data": cards}),
        "/metrics": httpx.Response(200, text=VLLM_METRICS),
    }
    async with engine(routes) as client:
        facts = await read_reported_facts(client, 1.0)
    assert facts == ReportedFacts(
        kind="vllm", gpu_slots=2, served_models=("loraplex-tiny",), model_folders=("loraplex-tiny",)
    )


async def test_a_model_list_of_another_shape_reports_no_model() -> None:
    routes = {"/v1/models": httpx.Response(200, json={"models": ["loraplex-tiny"]})}
    async with engine(routes) as client:
        facts = await read_reported_facts(client, 1.0)
    assert facts == ReportedFacts(kind="vllm")  # served_models None: not checked


async def test_an_oversized_answer_is_not_read_whole() -> None:
    routes = {"/server_info": httpx.Response(200, content=b"[" * (MAX_ANSWER_BYTES + 10))}
    async with engine(routes) as client:
        assert await read_reported_facts(client, 1.0) == ReportedFacts()


async def test_an_engine_that_does_not_answer_is_silent_not_wrong() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    transport = httpx.MockTransport(refuse)
    async with httpx.AsyncClient(base_url="http://engine", transport=transport) as client:
        with pytest.raises(EngineSilent):
            await read_reported_facts(client, 1.0)


def test_sglang_registered_as_vllm_is_refused_by_kind() -> None:
    claim = Claim("vllm", max_lora_rank=64, gpu_slots=4, host_slots=8)
    found = problems(claim, ReportedFacts(kind="sglang", gpu_slots=4))
    assert [p.param for p in found] == ["kind"]
    assert "SGLang" in found[0].message


def test_each_figure_that_disagrees_is_named_with_the_engine_flag() -> None:
    claim = Claim("sglang", max_lora_rank=381, gpu_slots=13, host_slots=16)
    reported = ReportedFacts(kind="sglang", max_lora_rank=64, gpu_slots=4, host_slots=8)
    found = problems(claim, reported)
    assert [p.param for p in found] == ["max_lora_rank", "gpu_slots", "host_slots"]
    assert "--max-loras-per-batch 4" in found[1].message


def test_figures_the_engine_does_not_report_are_taken_on_the_claim() -> None:
    claim = Claim("vllm", max_lora_rank=64, gpu_slots=2, host_slots=1000)
    assert problems(claim, ReportedFacts(kind="vllm", gpu_slots=2)) == []
    assert problems(claim, ReportedFacts()) == []


def test_a_vllm_rank_vllm_would_refuse_is_refused_before_asking() -> None:
    found = claim_problems(Claim("vllm", max_lora_rank=381, gpu_slots=2, host_slots=4))
    assert [p.param for p in found] == ["max_lora_rank"]
    assert claim_problems(Claim("sglang", max_lora_rank=381, gpu_slots=2, host_slots=4)) == []


def test_a_base_model_the_engine_does_not_serve_is_refused_naming_base_model() -> None:
    claim = Claim.of("vllm", 64, 2, 4, "llama-3.1-8b", "s3://models/base-models/llama-3.1-8b")
    reported = ReportedFacts(
        kind="vllm", served_models=("loraplex-tiny",), model_folders=("loraplex-tiny",)
    )
    found = problems(claim, reported)
    assert [p.param for p in found] == ["base_model"]
    assert found[0].message == (
        "base_model is 'llama-3.1-8b', but the engine at this url serves 'loraplex-tiny'"
    )


def test_an_engine_listing_no_base_model_serves_none_of_them() -> None:
    found = problems(Claim.of("vllm", 64, 2, 4, "tiny"), ReportedFacts(served_models=()))
    assert [(p.param, p.message.endswith("serves no base model")) for p in found] == [
        ("base_model", True)
    ]


@pytest.mark.parametrize(
    "base_model, source, served, folders",
    [
        ("loraplex-tiny", "generated://", ("loraplex-tiny",), ()),  # by name
        # a second name for one model folder (the suite's pools): by the registered source
        ("loraplex-tiny-vllm", "/repo/var/models/loraplex-tiny", ("loraplex-tiny",), ()),
        # served under a short name, started on the folder the base model is named after
        ("Llama-3.1-8B-Instruct", "", ("llama",), ("Llama-3.1-8B-Instruct",)),
    ],
)
def test_the_base_model_matches_by_name_or_by_folder(
    base_model: str, source: str, served: tuple[str, ...], folders: tuple[str, ...]
) -> None:
    claim = Claim.of("sglang", 64, 4, 8, base_model, source)
    reported = ReportedFacts(kind="sglang", served_models=served, model_folders=folders)
    assert problems(claim, reported) == []


def test_a_claim_without_a_base_model_or_a_report_without_one_is_not_held_to_it() -> None:
    reported = ReportedFacts(kind="vllm", served_models=("other",))
    assert problems(Claim("vllm", 64, 2, 4), reported) == []  # an engine from settings
    assert problems(Claim.of("vllm", 64, 2, 4, "tiny"), ReportedFacts(kind="vllm")) == []
