"""`loraplex dev make-model` and `make-adapter` write files and say what they wrote."""

from pathlib import Path

from click.testing import CliRunner

from loraplex.dev.cli import dev


def test_make_model_command_reports_the_weights_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(dev, ["make-model", str(tmp_path / "m"), "--seed", "2"])
    assert result.exit_code == 0, result.output
    assert "model.safetensors" in result.output
    assert (tmp_path / "m" / "config.json").is_file()


def test_make_adapter_command_writes_a_random_adapter(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "a"
    args = ["make-adapter", "--base", str(model_dir), "--rank", "4", "--random", str(out)]
    result = CliRunner().invoke(dev, args)
    assert result.exit_code == 0, result.output
    assert "random adapter r=4" in result.output
    assert (out / "adapter_model.safetensors").is_file()


def test_make_adapter_command_requires_a_base(tmp_path: Path) -> None:
    result = CliRunner().invoke(dev, ["make-adapter", "--rank", "4", str(tmp_path / "a")])
    assert result.exit_code == 2
    assert "--base" in result.output


def test_make_adapter_command_refuses_an_unknown_task(model_dir: Path, tmp_path: Path) -> None:
    args = ["make-adapter", "--base", str(model_dir), "--task", "poetry", str(tmp_path / "a")]
    result = CliRunner().invoke(dev, args)
    assert result.exit_code == 2
    assert "--task" in result.output
