"""The experiment config: command-line coercion, validation, and each ablation's resolved settings.

experiments/config.yaml holds every value of the grid; experiments/config.schema.yaml says what each
key may hold. The Snakefile validates the config that Snakemake assembled (the file plus --config);
`ablation_settings` then applies full_sweep and hands each ablation the flat dict that its grid in
experiments/grid.py expands, so the runners never read the config file themselves.
"""
import copy
import os

import yaml
import jsonschema
from snakemake.utils import update_config

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG_FILE = os.path.join(HERE, "config.yaml")
SCHEMA_FILE = os.path.join(HERE, "config.schema.yaml")

# Top-level keys that every ablation's settings carry beside its own section.
SHARED_KEYS = ("repetitions", "warmup_ms", "rep_ms", "tokens", "hidden", "head_dims", "dtypes")


def coerce_cli_strings(config: dict) -> dict:
    """Read strings as numbers or booleans where the schema asks for one, in place.

    `snakemake --config 'speed={seqlens: [512, 1024]}'` parses nested values with YAML's base
    loader, which leaves every scalar a string; coerced here, such overrides validate like the file.
    """
    with open(SCHEMA_FILE) as f:
        schema = yaml.safe_load(f)
    _coerce(config, schema, schema)
    return config


def _coerce(value, node: dict, schema: dict):
    while "$ref" in node or len(node.get("allOf", ())) == 1:
        if "$ref" in node:  # local references only: "#/$defs/name"
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        else:  # {allOf: [{$ref: ...}], description: ...}: a reference with a description of its own
            node = node["allOf"][0]
    if isinstance(value, dict):
        for key, item in value.items():
            if key in node.get("properties", {}):
                value[key] = _coerce(item, node["properties"][key], schema)
    elif isinstance(value, list) and "items" in node:
        value[:] = [_coerce(item, node["items"], schema) for item in value]
    elif isinstance(value, str) and node.get("type") in ("integer", "number", "boolean"):
        parsed = yaml.safe_load(value)
        if isinstance(parsed, (int, float, bool)):
            return parsed
    return value


class ConfigError(ValueError):
    """The config breaks the schema: the message names each bad key and what it may hold."""


def validate(config: dict) -> None:
    """Check `config` against config.schema.yaml; raise ConfigError naming each bad key.

    A misspelt key is reported with the keys its section allows, a bad value with what the schema
    expects there, never with the whole schema.
    """
    with open(SCHEMA_FILE) as f:
        schema = yaml.safe_load(f)
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
        node = _resolve(error.schema, schema)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = sorted(node.get("properties", {}))
            unknown = sorted(set(error.instance) - set(allowed))
            for key in unknown:
                name = f"{where}.{key}" if error.absolute_path else key
                problems.append(f"config key {name}: unknown key; allowed here: {', '.join(allowed)}")
        elif error.validator == "enum":
            problems.append(f"config key {where}: {error.instance!r} is not one of {error.validator_value}")
        elif error.validator == "required":
            problems.append(f"config key {where}: {error.message}")
        else:
            problems.append(f"config key {where}: {error.instance!r}: {error.message}"
                            + (f" ({node['description']})" if node.get("description") else ""))
    if problems:
        raise ConfigError("experiments/config.yaml or --config: " + "; ".join(problems))


def _resolve(node: dict, schema: dict) -> dict:
    while isinstance(node, dict) and "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def check(config: dict) -> None:
    """Validate the config against the schema and the relations that a schema cannot express."""
    validate(config)
    for head_dim in config["head_dims"] + config["fp8"]["head_dims"]:
        if config["hidden"] % head_dim:
            raise ValueError(f"config key hidden: {config['hidden']} is not a multiple of head dim {head_dim} "
                             "(head_dims, fp8.head_dims)")
    for head_dim in config["speed"]["head_dims"]:  # the whole heads that fit (grid.paper_shape): at least one
        if head_dim > config["hidden"]:
            raise ValueError(f"config key speed.head_dims: {head_dim} is larger than hidden={config['hidden']}")
    for section, accuracy in (("accuracy", config["accuracy"]), ("fp8.accuracy", config["fp8"]["accuracy"])):
        for key in ("shapes", "interpreter_shapes"):
            for i, shape in enumerate(accuracy[key]):
                if shape["heads"] % shape["kv_heads"]:
                    raise ValueError(f"config key {section}.{key}[{i}].kv_heads: {shape['kv_heads']} does not "
                                     f"divide heads={shape['heads']}")
    features = config["features"]
    if config["hidden"] % features["head_dim"]:
        raise ValueError(f"config key features.head_dim: {features['head_dim']} does not divide "
                         f"hidden={config['hidden']}")
    if features["varlen"]["min_len"] > features["varlen"]["max_len"]:
        raise ValueError("config key features.varlen.min_len: longer than features.varlen.max_len")
    for i, (heads, kv_heads) in enumerate(config["decode"]["heads"]):
        if heads % kv_heads:
            raise ValueError(f"config key decode.heads[{i}]: kv heads {kv_heads} do not divide query heads {heads}")
    agreement = config["training"]["loss_agreement"]
    if agreement["hidden"] % agreement["heads"]:
        raise ValueError(f"config key training.loss_agreement.heads: {agreement['heads']} does not divide "
                         f"hidden={agreement['hidden']}")


def ablation_settings(config: dict, ablations) -> dict[str, dict]:
    """Each ablation's flat settings: the shared top-level keys plus its section, full_sweep applied."""
    if config["full_sweep"]:
        config = copy.deepcopy(config)
        update_config(config, config["full_sweep_overrides"])
        check(config)
    shared = {key: config[key] for key in SHARED_KEYS}
    shared["ceiling_matmul_size"] = config["ceiling"]["matmul_size"]  # the matmul timed in every pass
    return {name: {**shared, **config[name]} for name in ablations}


def load_default() -> dict:
    """experiments/config.yaml, checked: for running one ablation outside Snakemake."""
    with open(CONFIG_FILE) as f:
        config = yaml.safe_load(f)
    check(config)
    return config
