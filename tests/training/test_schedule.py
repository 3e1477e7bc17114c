"""The learning-rate schedule against Eq. 3 computed by hand."""

import math

import keras
import pytest

from keras_transformer.training import WarmupSchedule, paper_optimizer


def eq3(d_model, warmup, step):
    # Section 5.3, Eq. 3, with the paper's 1-based step number.
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("iteration", [0, 1, 99, 3999, 4000, 10_000, 99_999])
def test_matches_eq3_for_base(iteration):
    schedule = WarmupSchedule(d_model=512, warmup_steps=4000)
    assert float(schedule(iteration)) == pytest.approx(eq3(512, 4000, iteration + 1), rel=1e-6)


def test_hand_computed_values():
    schedule = WarmupSchedule(d_model=512, warmup_steps=4000)
    # Step 1: 512^-0.5 * 1 * 4000^-1.5
    assert float(schedule(0)) == pytest.approx(1 / math.sqrt(512) / 4000**1.5, rel=1e-6)
    # The peak at step == warmup: (512 * 4000)^-0.5 = 6.9877e-4
    assert float(schedule(3999)) == pytest.approx(6.987712429686844e-4, rel=1e-6)
    # Step 16000: 512^-0.5 * 16000^-0.5 = 1/sqrt(8,192,000)
    assert float(schedule(15_999)) == pytest.approx(1 / math.sqrt(8_192_000), rel=1e-6)


def test_rises_then_decays():
    schedule = WarmupSchedule(d_model=64, warmup_steps=10)
    values = [float(schedule(i)) for i in range(30)]
    assert values[:10] == sorted(values[:10])
    assert values[9:] == sorted(values[9:], reverse=True)


def test_scale_and_serialization():
    schedule = WarmupSchedule(d_model=256, warmup_steps=100, scale=2.0)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(again(50)) == pytest.approx(2.0 * eq3(256, 100, 51), rel=1e-6)


@pytest.mark.parametrize("field", ["d_model", "warmup_steps", "scale"])
def test_rejects_non_positive(field):
    kwargs = {"d_model": 8, "warmup_steps": 10, "scale": 1.0, field: 0}
    with pytest.raises(ValueError, match=field):
        WarmupSchedule(**kwargs)


def test_paper_optimizer_hyperparameters():
    optimizer = paper_optimizer(d_model=512, warmup_steps=4000)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)


def test_the_cooldown_schedule_multiplies_eq3_by_its_factor_and_round_trips():
    from keras_transformer.training.accumulation import PerUpdateSchedule
    from keras_transformer.training.schedule import CooldownSchedule, find_cooldown

    cooled = CooldownSchedule(WarmupSchedule(d_model=128, warmup_steps=400))
    assert float(cooled(999)) == pytest.approx(eq3(128, 400, 1000), rel=1e-6)
    cooled.factor.assign(0.25)
    assert float(cooled(999)) == pytest.approx(0.25 * eq3(128, 400, 1000), rel=1e-6)
    reloaded = CooldownSchedule.from_config(cooled.get_config())  # the factor is not config: it starts at 1
    assert float(reloaded(999)) == pytest.approx(eq3(128, 400, 1000), rel=1e-6)
    assert find_cooldown(PerUpdateSchedule(cooled, 2)) is cooled
    assert find_cooldown(WarmupSchedule(d_model=128)) is None
