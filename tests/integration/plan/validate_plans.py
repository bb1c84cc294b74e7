"""Validates plan files against schemas/plan.schema.json with a real JSON
Schema validator (python-jsonschema, Draft 2020-12). Prints one line per
problem and exits 1 when there is any. Usage: validate_plans.py SCHEMA PLAN..."""
import json
import sys
import tomllib

import jsonschema
import yaml


def load(path):
    with open(path, "rb") as f:
        if path.endswith(".toml"):
            return tomllib.load(f)
        return yaml.safe_load(f)


def main():
    schema = json.load(open(sys.argv[1]))
    validator = jsonschema.Draft202012Validator(schema)
    problems = 0
    for path in sys.argv[2:]:
        for error in validator.iter_errors(load(path)):
            problems += 1
            where = "/".join(str(p) for p in error.absolute_path)
            print(f"{path}: {where}: {error.message}")
    print(f"{len(sys.argv) - 2} plans checked, {problems} problems")
    sys.exit(1 if problems else 0)


main()
