"""The kiln cluster spec (version 1): models, loading and validation."""

from kiln.spec.load import load_spec, parse_spec
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem, SpecError

__all__ = ["ClusterSpec", "Problem", "SpecError", "load_spec", "parse_spec"]
