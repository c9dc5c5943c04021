"""The README leads with the two commands and points to docs/; the configuration reference is the
one the schema generates."""

import re
from pathlib import Path

from grpoflow.config import describe_schema, load_params, schema_markdown

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
    assert missing == []


def test_the_configuration_table_is_the_generated_one():
    assert schema_markdown(load_params(REPO / "params" / "default.yaml")) in CONFIGURATION, \
        "regenerate it: python -m grpoflow.config.docs"
