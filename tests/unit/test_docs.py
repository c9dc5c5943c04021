"""The README leads with the two commands and points to docs/; the configuration reference is the
one the schema generates."""

import re
from pathlib import Path

from grpoflow.config import describe_schema, load_params, schema_markdown
from grpoflow.config.docs import schema_rows

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text()


def test_readme_leads_with_the_two_commands():
    first_block = README.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block


def test_every_link_to_a_project_file_resolves():
    for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"


def test_the_configuration_reference_documents_every_key():
    missing = [key for key, _, _ in describe_schema() if f"`{key}`" not in CONFIGURATION]
    assert missing == [], "regenerate the table: python -m grpoflow.config.docs --write"


def test_the_configuration_table_is_the_generated_one():
    assert schema_markdown(load_params(REPO / "params" / "default.yaml")) in CONFIGURATION, (
        "regenerate it: python -m grpoflow.config.docs --write"
    )


def test_the_reference_shows_each_fields_constraints_and_expands_nested_sections():
    rows = {r.key: r for r in schema_rows()}
    assert rows["data.leakage.ngram_min_overlap"].allowed == ">= 0, <= 1"
    assert rows["data.leakage.action"].allowed == "one of 'fail', 'drop'"
    assert rows["data.sources"].allowed == "at least 1 item"
    assert (rows["data.sources[].kind"].default, rows["data.sources[].kind"].dotted) == ("required", None)
    assert rows["model.lora.rank"].allowed == ">= 1" and rows["model.lora.rank"].default == "16"
    assert rows["rewards[].normalize"].allowed == "one of 'none', 'running'"
    assert "ablation.custom_arms.<name>.algorithm" in rows
    assert "| `rewards[].weight` | `float` |  | `1.0` |" in CONFIGURATION
