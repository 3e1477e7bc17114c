"""Where training runs: the ``tf.distribute`` strategy and this process's place in a ``TF_CONFIG`` cluster.

Section 5.2 trained on one machine with 8 GPUs; :func:`get_strategy` picks
``MirroredStrategy`` over local devices, ``MultiWorkerMirroredStrategy`` for
a cluster of several processes (described by the ``TF_CONFIG`` environment
variable), or the default single-device strategy. Batch sizes are global:
each step's batch is split across the replicas. In a cluster every worker
saves and restores its own training state (:func:`task_dir`), but only the
chief's (:func:`is_chief`) is the run's.
"""

from __future__ import annotations

import json
import os
import pathlib

import tensorflow as tf

__all__ = ["get_strategy", "in_cluster", "is_chief", "task_dir"]


def in_cluster() -> bool:
    """Whether ``TF_CONFIG`` describes a cluster of more than one task.

    Then ``MultiWorkerMirroredStrategy`` is the strategy, and it must be
    created before TensorFlow runs its first op.

    Returns:
        True when the ``cluster`` of the ``TF_CONFIG`` environment variable
        (JSON) lists two or more tasks over all its task types; False without
        ``TF_CONFIG``.

    Raises:
        json.JSONDecodeError: when ``TF_CONFIG`` is not JSON.
    """
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    return sum(len(v) for v in cluster.values()) > 1


def get_strategy(name: str = "auto", devices: list[str] | None = None) -> tf.distribute.Strategy:
    """The ``tf.distribute`` strategy to build and train the model under.

    Args:
        name: ``"auto"`` (``MultiWorkerMirroredStrategy`` when ``TF_CONFIG``
            describes a cluster of more than one task, else
            ``MirroredStrategy`` over all local GPUs when there are several,
            else the default single-device strategy); ``"mirrored"`` (all local
            GPUs, or all logical CPU devices when there is no GPU, or
            ``devices``); ``"multi_worker"`` (``MultiWorkerMirroredStrategy``
            from the ``TF_CONFIG`` environment variable); ``"default"``.
        devices: explicit device names for ``"mirrored"``.

    Returns:
        A ``tf.distribute.Strategy``. Batch sizes given to ``fit`` are global:
        each step's batch is split across its replicas.

    Raises:
        ValueError: for an unknown name, or ``"multi_worker"`` without
            ``TF_CONFIG``.
    """
    if name == "auto":
        if in_cluster():
            return tf.distribute.MultiWorkerMirroredStrategy()
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
    if name == "mirrored":
        if devices is None:
            gpus = tf.config.list_logical_devices("GPU")
            devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("strategy 'multi_worker' needs the TF_CONFIG environment variable (cluster and task)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "default":
        return tf.distribute.get_strategy()
    raise ValueError(f"unknown strategy {name!r}; choose auto, mirrored, multi_worker or default")


def is_chief() -> bool:
    """Whether this process is the chief of its ``TF_CONFIG`` cluster (True without one).

    The chief is task ``chief`` if the cluster has one, else ``worker`` 0.
    """
    config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = config.get("task", {})
    if not task:
        return True
    if "chief" in config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0


def task_dir(model_dir: str | os.PathLike) -> pathlib.Path:
    """Where this process writes its training state: ``model_dir`` on the chief, ``model_dir/<type>-<index>`` elsewhere.

    Every worker of a ``MultiWorkerMirroredStrategy`` cluster must save and
    restore its own checkpoints (and any state that decides when training
    stops), but only the chief's are the run's: the others write beside it,
    in their own folder.

    Args:
        model_dir: the run's folder.

    Returns:
        The folder (not created).
    """
    model_dir = pathlib.Path(model_dir)
    if is_chief():
        return model_dir
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    return model_dir / f"{task['type']}-{task.get('index', 0)}"
