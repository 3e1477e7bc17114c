"""The application: a run's workflows over its folder and settings (the Python API under the CLI and the notebook).

* :mod:`~keras_transformer.runner.runner`: :class:`Runner`, one method per workflow.
* :mod:`~keras_transformer.runner.training`: a run's training, step by step.
* :mod:`~keras_transformer.runner.main_job`: ``run``: train, test, export, ``results.json``.
* :mod:`~keras_transformer.runner.translating`: translating, scoring and exporting with the decoding settings.
* :mod:`~keras_transformer.runner.data`: the parallel text the data settings name.

The settings are :mod:`keras_transformer.settings`; the run folder is
:mod:`keras_transformer.run_folder`.
"""

from keras_transformer.runner.runner import Runner
from keras_transformer.runner.training import TrainResult
from keras_transformer.runner.translating import ExportResult

__all__ = ["ExportResult", "Runner", "TrainResult"]
