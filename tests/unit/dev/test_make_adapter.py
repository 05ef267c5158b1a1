"""`make_adapter`: valid PEFT LoRA files; trained adapters answer their examples greedily."""

import json
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from loraplex.dev.corpus import tool_definitions, tool_examples
from loraplex.dev.make_adapter import adapter_examples, greedy_answer, make_adapter
from loraplex.dev.reference import greedy_answers


def _config(adapter_dir: Path) -> dict:
    return json.loads((adapter_dir / "adapter_config.json").read_text())


@pytest.mark.slow
def test_trained_adapter_answers_every_example(model_dir: Path, trained_adapter_dir: Path) -> None:
    questions, answers = zip(*adapter_examples(3), strict=True)
    assert greedy_answers(model_dir, trained_adapter_dir, questions) == list(answers)


@pytest.mark.slow
def test_base_model_answers_no_example(model_dir: Path) -> None:
    questions, answers = zip(*adapter_examples(3), strict=True)
    replies = greedy_answers(model_dir, None, questions)
    assert not any(reply == answer for reply, answer in zip(replies, answers, strict=True))


@pytest.mark.slow
def test_greedy_answer_returns_only_the_new_text(
    model_dir: Path, trained_adapter_dir: Path
) -> None:
    question, answer = adapter_examples(3)[0]
    assert greedy_answer(model_dir, trained_adapter_dir, question) == answer


@pytest.mark.slow
def test_tools_adapter_answers_every_question_with_its_call(
    model_dir: Path, tools_adapter_dir: Path
) -> None:
    examples = tool_examples(0)
    questions = [example.question for example in examples]
    replies = greedy_answers(model_dir, tools_adapter_dir, questions, tools=tool_definitions())
    assert replies == [example.answer for example in examples]


@pytest.mark.slow
def test_adapter_is_trained_on_given_examples(model_dir: Path, tmp_path: Path) -> None:
    examples = [("Who are you?", "I am a test adapter.")]
    out = make_adapter(model_dir, tmp_path / "custom", 4, examples=examples)
    assert greedy_answer(model_dir, out, "Who are you?") == "I am a test adapter."


@pytest.mark.slow
def test_random_adapter_changes_the_logits(model_dir: Path, random_adapter_dir: Path) -> None:
    base = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids = torch.tensor([[1, 50, 60, 70, 80]])
    with torch.no_grad():
        base_logits = base(ids).logits
        tuned = PeftModel.from_pretrained(base, random_adapter_dir).eval()
        adapter_logits = tuned(ids).logits
    assert (adapter_logits - base_logits).abs().max() > 1e-2


def test_adapter_holds_only_the_two_peft_files(random_adapter_dir: Path) -> None:
    names = sorted(path.name for path in random_adapter_dir.iterdir())
    assert names == ["adapter_config.json", "adapter_model.safetensors"]


def test_adapter_config_records_rank_alpha_and_targets(random_adapter_dir: Path) -> None:
    config = _config(random_adapter_dir)
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 16, 32)
    assert sorted(config["target_modules"]) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


def test_adapter_names_its_base_by_folder_name(random_adapter_dir: Path, model_dir: Path) -> None:
    assert _config(random_adapter_dir)["base_model_name_or_path"] == model_dir.name


def test_adapter_tensors_have_the_configured_rank(random_adapter_dir: Path) -> None:
    with safe_open(random_adapter_dir / "adapter_model.safetensors", "pt") as tensors:
        shapes = {name: tensors.get_slice(name).get_shape() for name in tensors.keys()}  # noqa: SIM118
    assert len(shapes) == 4 * 7 * 2  # layers x target modules x (A, B)
    assert all(shape[0] == 16 for name, shape in shapes.items() if "lora_A" in name)
    assert all(shape[1] == 16 for name, shape in shapes.items() if "lora_B" in name)


def test_alpha_option_is_recorded(model_dir: Path, tmp_path: Path) -> None:
    out = make_adapter(model_dir, tmp_path / "alpha", 2, alpha=7.0, random=True)
    assert _config(out)["lora_alpha"] == 7.0
