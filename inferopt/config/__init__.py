"""Configuration: the models (`models.py`) and `load_config` with errors that name file, field and fix
(`loader.py`). Import everything from here: `from inferopt.config import CandidateConfig, load_config`."""

from inferopt.config.loader import detect_kind, format_validation_error, load_case, load_config, set_dotted
from inferopt.config.models import *  # noqa: F403
from inferopt.config.models import __all__ as _models_all

__all__ = ["detect_kind", "format_validation_error", "load_case", "load_config", "set_dotted", *_models_all]
