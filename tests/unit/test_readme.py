from pathlib import Path

from grpoflow.config import describe_schema, schema_markdown

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_readme_documents_every_params_key():
    missing = [key for key, _, _ in describe_schema() if f"`{key}`" not in README]
    assert missing == []


def test_readme_leads_with_the_two_commands():
    first_block = README.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block


def test_readme_configuration_table_is_the_generated_one():
    assert schema_markdown() in README, "regenerate it: python -m grpoflow.config"
