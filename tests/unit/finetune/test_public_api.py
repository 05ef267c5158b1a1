"""The fine-tuning packages' public surfaces."""

import loraplex.finetune
import loraplex.workers.trainer


def test_finetune_exports_the_dataset_validator() -> None:
    surface = "DatasetRejected DatasetStats JsonlValidator LineError Method validate_jsonl"
    assert sorted(loraplex.finetune.__all__) == surface.split()


def test_trainer_exports_config_results_and_train() -> None:
    surface = "BASE_LEARNING_RATE Method Progress TrainConfig TrainResult TrainingCancelled train"
    assert sorted(loraplex.workers.trainer.__all__) == surface.split()
    assert all(hasattr(loraplex.workers.trainer, name) for name in loraplex.workers.trainer.__all__)
