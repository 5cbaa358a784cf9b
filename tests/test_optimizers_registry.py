"""The optimizer registry: names, slots and defaults (spec sections 11-13), laziness, errors, the
state and hyper-parameter NamedTuples against the algorithm table, binding, and the properties
every update function shares (float32 in and out, inputs untouched, empty blocks)."""

from __future__ import annotations

from types import CodeType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tpuemb_cfg.algorithms import ALGORITHMS
from tpuemb_cfg.algorithms import update as update_module
from tpuemb_cfg.executor.optimizers import REGISTRY, Optimizer, UpdateContext, get, unsupported

UNSUPPORTED = {name for name in ALGORITHMS if unsupported(name) is not None}

# Spec section 13, copied by hand: oneof name -> slot names in state order and default values.
SUMMARY: dict[str, tuple[tuple[str, ...], tuple[float, ...]]] = {
    "stochastic_gradient_descent": ((), ()),
    "adagrad": (("accumulators",), (0.1,)),
    "adagrad_momentum": (("accumulators", "momenta"), (0.0, 0.0)),
    "bounded_adagrad": (("accumulators",), (0.1,)),
    "frequency_aware_adagrad": (("accumulators", "counters"), (0.25, 0.0)),  # see HYPER
    "ftrl": (("accumulators", "linears"), (0.1, 0.0)),
    "adam": (("momenta", "velocities"), (0.0, 0.0)),
    "momentum": (("momenta",), (0.0,)),
    "lion": (("momenta",), (0.0,)),
    "rms_prop": (("ms", "mom"), (0.0, 0.0)),
    "centered_rms_prop": (("ms", "mom", "mg"), (0.0, 0.0, 0.0)),
    "adadelta": (("accumulators", "updates"), (0.0, 0.0)),
    "proximal_adagrad": (("accumulators",), (0.1,)),
    "proximal_yogi": (("v", "m"), (1e-6, 0.0)),
    "frequency_estimator": (("last_hit_step",), (0.0,)),
    "assign": ((), ()),
}

LABELS = {
    "stochastic_gradient_descent": "TPU-OSS, CPU-KERNEL",
    "adagrad": "TPU-OSS, CPU-KERNEL",
    "adagrad_momentum": "TPU-OSS",
    "bounded_adagrad": "RECON",
    "frequency_aware_adagrad": "RECON",
    "ftrl": "TPU-OSS, CPU-KERNEL",
    "adam": "TPU-OSS, CPU-KERNEL",
    "momentum": "PROTO, CPU-KERNEL",
    "lion": "PROTO",
    "rms_prop": "PROTO, CPU-KERNEL",
    "centered_rms_prop": "PROTO, CPU-KERNEL",
    "adadelta": "PROTO, CPU-KERNEL",
    "proximal_adagrad": "PROTO, CPU-KERNEL",
    "proximal_yogi": "RECON",
    "frequency_estimator": "PROTO",
    "assign": "PROTO",
}

# Hyper-parameters that give every optimizer a finite, non-trivial step.
HYPER = {
    "stochastic_gradient_descent": SimpleNamespace(),
    "adagrad": SimpleNamespace(),
    "adagrad_momentum": SimpleNamespace(
        momentum=0.9, use_nesterov=True, exponent=2.0, beta2=0.99, epsilon=1e-3
    ),
    "bounded_adagrad": SimpleNamespace(
        update_accumulator_first=True, max_var_update=0.1, max_accumulator=10.0
    ),
    "frequency_aware_adagrad": SimpleNamespace(
        l1_regularization_strength=0.01, l2_regularization_strength=0.01,
        probability_exponent=0.5, max_lr_multiplier=4.0, accumulator_decay=0.9,
        initial_accumulator_value=0.25, step_counter=SimpleNamespace(tag=1),
    ),
    "ftrl": SimpleNamespace(l1=0.01, l2=0.01, lr_power=-0.5, beta=0.1, multiply_linear_by_lr=False),
    "adam": SimpleNamespace(
        beta1=0.9, beta2=0.999, epsilon=1e-8, use_sum_inside_sqrt=True, use_non_lazy_adam=False
    ),
    "momentum": SimpleNamespace(momentum=0.9, use_nesterov=False),
    "lion": SimpleNamespace(beta1=0.9, beta2=0.99, use_non_lazy_lion=False),
    "rms_prop": SimpleNamespace(rho=0.9, momentum=0.5, epsilon=1e-6),
    "centered_rms_prop": SimpleNamespace(rho=0.9, momentum=0.5, epsilon=1e-6),
    "adadelta": SimpleNamespace(rho=0.9, epsilon=1e-6),
    "proximal_adagrad": SimpleNamespace(l1=0.01, l2=0.01),
    "proximal_yogi": SimpleNamespace(l1=0.01, l2=0.01, beta1=0.9, beta2=0.999, epsilon=1e-3),
    "frequency_estimator": SimpleNamespace(
        tau=0.1, max_delta=100.0, outlier_threshold=2.0, weight_exponent=1.0
    ),
    "assign": SimpleNamespace(),
}

CTX = UpdateContext(step=3, dynamic_inputs=(0.05, 7.0))


def test_registry_holds_exactly_the_simulatable_optimizers() -> None:
    assert set(REGISTRY) == set(SUMMARY)
    assert UNSUPPORTED == {"mdl_adagrad_light", "online_yogi", "user_defined_program"}
    assert not set(REGISTRY) & UNSUPPORTED
    assert set(REGISTRY) | UNSUPPORTED == set(ALGORITHMS)


@pytest.mark.parametrize("name", sorted(SUMMARY))
def test_slots_defaults_and_labels_match_the_spec(name: str) -> None:
    spec = get(name)
    assert isinstance(spec, Optimizer)
    assert spec.name == name
    names, defaults = SUMMARY[name]
    assert tuple(slot.name for slot in spec.slots) == names
    got = tuple(np.float32(slot.initial_value(HYPER[name])) for slot in spec.slots)
    assert got == tuple(np.float32(d) for d in defaults)
    assert spec.equations == LABELS[name]


@pytest.mark.parametrize("name", sorted(SUMMARY))
def test_state_fields_are_the_algorithm_tables_slots(name: str) -> None:
    """The state NamedTuple names each slot of the algorithm table, in TensorFlow's order."""
    spec = get(name)
    assert spec.state._fields == ALGORITHMS[name].slot_names


@pytest.mark.parametrize("name", sorted(SUMMARY))
def test_bind_gives_float32_hyper_parameters(name: str) -> None:
    """``bind`` reads the sub-message once into plain float32 (or bool/int) values."""
    spec = get(name)
    hyper = spec.bind(HYPER[name])
    assert isinstance(hyper, spec.hyper)
    for field, value in zip(hyper._fields, hyper, strict=True):
        assert type(value) in (np.float32, bool, int), (field, type(value))
        if type(value) is np.float32:
            assert value == np.float32(getattr(HYPER[name], field))


def test_frequency_aware_adagrad_binds_its_step_counter_tag() -> None:
    spec = get("frequency_aware_adagrad")
    assert spec.bind(HYPER["frequency_aware_adagrad"]).step_counter_tag == 1
    unset = SimpleNamespace(**{**vars(HYPER["frequency_aware_adagrad"]), "step_counter": None})
    assert spec.bind(unset).step_counter_tag == 0


def test_frequency_aware_adagrad_accumulator_starts_at_its_floor() -> None:
    spec = get("frequency_aware_adagrad")
    hyper = SimpleNamespace(
        **{**vars(HYPER["frequency_aware_adagrad"]), "initial_accumulator_value": 0.7}
    )
    assert np.float32(spec.slots[0].initial_value(hyper)) == np.float32(0.7)


@pytest.mark.parametrize("name", sorted(SUMMARY))
def test_laziness(name: str) -> None:
    spec = get(name)
    hyper = HYPER[name]
    assert spec.lazy(hyper) is True
    if name == "adam":
        assert spec.lazy(SimpleNamespace(**{**vars(hyper), "use_non_lazy_adam": True})) is False
    if name == "lion":
        assert spec.lazy(SimpleNamespace(**{**vars(hyper), "use_non_lazy_lion": True})) is False


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_optimizers_raise_value_error_naming_them(name: str) -> None:
    with pytest.raises(ValueError, match=f"'{name}' cannot be simulated: .*no") as info:
        get(name)
    assert "section 12." in str(info.value)


def test_unknown_and_missing_optimizer_names_raise_value_error() -> None:
    with pytest.raises(ValueError, match=r"unknown optimizer 'adamw': expected one of adadelta, "):
        get("adamw")
    with pytest.raises(ValueError, match="has no optimizer"):
        get("")


def _block(n_rows: int, dim: int, name: str, seed: int) -> tuple[np.ndarray, Any, np.ndarray]:
    rng = np.random.default_rng(seed)
    spec = get(name)
    params = rng.uniform(-1.0, 1.0, (n_rows, dim)).astype(np.float32)
    if name == "frequency_estimator":
        params = rng.uniform(1.0, 50.0, (n_rows, dim)).astype(np.float32)
    slots = spec.state(*(
        np.full((n_rows, dim), slot.initial_value(HYPER[name]), dtype=np.float32)
        for slot in spec.slots
    ))
    grad = rng.uniform(-1.0, 1.0, (n_rows, dim)).astype(np.float32)
    if name == "frequency_estimator":
        grad[:] = 0.0
    return params, slots, grad


@pytest.mark.parametrize("name", sorted(SUMMARY))
@pytest.mark.parametrize("n_rows", [0, 1, 5])
def test_updates_are_float32_shape_preserving_and_leave_inputs_alone(
    name: str, n_rows: int
) -> None:
    spec = get(name)
    params, slots, grad = _block(n_rows, 3, name, seed=n_rows)
    copies = (params.copy(), tuple(s.copy() for s in slots), grad.copy())
    lr = np.float32(0.05) if name != "frequency_estimator" else np.float32(12.0)
    new_params, new_slots = spec.update(params, slots, grad, lr, spec.bind(HYPER[name]), CTX)
    assert isinstance(new_slots, spec.state)
    assert new_params.dtype == np.float32 and new_params.shape == params.shape
    assert len(new_slots) == len(spec.slots)
    for new, old in zip(new_slots, slots, strict=True):
        assert new.dtype == np.float32 and new.shape == old.shape
        assert not np.shares_memory(new, old) or n_rows == 0
    assert not np.shares_memory(new_params, params) or n_rows == 0
    assert np.all(np.isfinite(new_params))
    np.testing.assert_array_equal(params, copies[0])
    for s, c in zip(slots, copies[1], strict=True):
        np.testing.assert_array_equal(s, c)
    np.testing.assert_array_equal(grad, copies[2])
    if n_rows:
        assert not np.array_equal(new_params, params)


@pytest.mark.parametrize("name", sorted(SUMMARY))
def test_updates_are_deterministic_and_row_independent(name: str) -> None:
    """Updating a block at once equals updating each row alone, byte for byte."""
    spec = get(name)
    params, slots, grad = _block(4, 2, name, seed=11)
    lr = np.float32(0.05) if name != "frequency_estimator" else np.float32(12.0)
    hyper = spec.bind(HYPER[name])
    whole_p, whole_s = spec.update(params, slots, grad, lr, hyper, CTX)
    for r in range(4):
        row_p, row_s = spec.update(
            params[r : r + 1],
            spec.state(*(s[r : r + 1] for s in slots)),
            grad[r : r + 1],
            lr,
            hyper,
            CTX,
        )
        assert row_p.tobytes() == whole_p[r : r + 1].tobytes()
        for a, b in zip(row_s, whole_s, strict=True):
            assert a.tobytes() == b[r : r + 1].tobytes()


def test_every_numpy_update_is_made_from_its_element() -> None:
    """Each optimizer's equations are written once, as its scalar element (issue 35): its NumPy
    update is ``register_element``'s, the element run over whole arrays, so no family module
    writes the equations a second time."""
    code = update_module.register_element.__code__
    made = next(c for c in code.co_consts if isinstance(c, CodeType) and c.co_name == "update")
    for name, optimizer in REGISTRY.items():
        assert optimizer.elements, name
        assert optimizer.update.__code__ is made, name
        assert optimizer.update.__doc__ == optimizer.elements[0].__doc__, name
