"""An experiment and the commands' options: one pydantic model per TOML section, defaults <
TOML < --set overrides < a command's flags.

Each field's docstring is its help text (`dlperf config show` prints the resolved tree).
The modules, by owner: base (the strict Section, shared ranges, the precision names),
experiment ([model], [data], [train], [augment], [target], [run]; Experiment; Job), one
module per command's section with its job ([scale], [serve], [detect], [distill],
[analyze], [predict], [export], [infer], [converge]; `detect finetune` and `detect eval` for
[detect]), and loading (TOML, --set, flags, validation messages). Everything is named here
too: `from dlperf.config import X`.
"""

from __future__ import annotations

from dlperf.config.analyze import AnalyzeConfig, AnalyzeJob
from dlperf.config.base import (
    PRECISIONS,
    Count,
    Fraction,
    Mean,
    NonNegative,
    Positive,
    Precision,
    Rate,
    Section,
    Seed,
    Size,
    Std,
)
from dlperf.config.converge import ConvergeConfig, ConvergeJob
from dlperf.config.detect import DetectConfig, DetectJob
from dlperf.config.distill import DistillConfig, DistillJob
from dlperf.config.experiment import (
    AugmentConfig,
    DataConfig,
    Experiment,
    Job,
    ModelConfig,
    ProfileConfig,
    RunConfig,
    ScheduleConfig,
    TargetConfig,
    TrainConfig,
)
from dlperf.config.export import ExportConfig, ExportJob
from dlperf.config.infer import InferConfig, InferJob
from dlperf.config.loading import (
    Commands,
    apply_override,
    assign,
    build_experiment,
    build_file,
    check_keys,
    describe,
    load_experiment,
    load_file,
    load_job,
    parse_value,
    read_toml,
    shortcuts,
    stored_experiment,
    to_toml,
    validation_message,
)
from dlperf.config.predict import SI, PredictConfig, PredictJob
from dlperf.config.scale import ScaleConfig, ScaleJob, ScaleMode
from dlperf.config.serve import ServeConfig, ServeJob

__all__ = [
    "PRECISIONS",
    "SI",
    "AnalyzeConfig",
    "AnalyzeJob",
    "AugmentConfig",
    "Commands",
    "ConvergeConfig",
    "ConvergeJob",
    "Count",
    "DataConfig",
    "DetectConfig",
    "DetectJob",
    "DistillConfig",
    "DistillJob",
    "Experiment",
    "ExportConfig",
    "ExportJob",
    "Fraction",
    "InferConfig",
    "InferJob",
    "Job",
    "Mean",
    "ModelConfig",
    "NonNegative",
    "Positive",
    "Precision",
    "PredictConfig",
    "PredictJob",
    "ProfileConfig",
    "Rate",
    "RunConfig",
    "ScaleConfig",
    "ScaleJob",
    "ScaleMode",
    "ScheduleConfig",
    "Section",
    "Seed",
    "ServeConfig",
    "ServeJob",
    "Size",
    "Std",
    "TargetConfig",
    "TrainConfig",
    "apply_override",
    "assign",
    "build_experiment",
    "build_file",
    "check_keys",
    "describe",
    "load_experiment",
    "load_file",
    "load_job",
    "parse_value",
    "read_toml",
    "shortcuts",
    "stored_experiment",
    "to_toml",
    "validation_message",
]
