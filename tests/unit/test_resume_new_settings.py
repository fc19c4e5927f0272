"""A run written before a train setting existed resumes under the new version: the missing setting
is read as its default (what the run trained with), and any other value is still refused."""

import pytest

from ptmkit.errors import PtmError
from ptmkit.train.config import TrainConfig
from ptmkit.workflows.rundir import check_compatible


def _config(**train):
    return {"model": {"hidden_size": 32}, "train": {"lr": 1e-3, "max_steps": 10, **train}}


def test_a_setting_the_stored_run_lacks_reads_as_its_default():
    stored = _config()
    check_compatible(stored, _config(optimizer=TrainConfig().optimizer, betas=list(TrainConfig().betas)))


def test_a_setting_the_stored_run_lacks_is_refused_at_another_value():
    with pytest.raises(PtmError, match=r"train.optimizer: 'adamw' in the run, 'lamb' now"):
        check_compatible(_config(), _config(optimizer="lamb"))


def test_model_settings_are_not_defaulted():
    with pytest.raises(PtmError, match=r"model.norm: None in the run, 'pre' now"):
        check_compatible(_config(), {**_config(), "model": {"hidden_size": 32, "norm": "pre"}})
