"""senses.usages: the schema's keys and defaults, and the checks that refuse a source's missing or unused files."""

import copy

import pytest

from conftest import PROJECT
from contextuality.workflow.checks import checked_settings
from contextuality.workflow.schema import ConfigError
from workflow_runs import smoke_config

DATA = PROJECT / "tests" / "data" / "wsd"
WSD = {"source": "wsd_xml", "xml": str(DATA / "tiny.data.xml"), "gold_key": str(DATA / "tiny.gold.key.txt")}


def _settings(usages: dict | None):
    config = copy.deepcopy(smoke_config())
    if usages is not None:
        config["senses"]["usages"] = usages
    return checked_settings(config)


def test_the_default_is_wordnet_and_a_wsd_corpus_is_read_from_its_files():
    assert _settings(None).sense_usages == {"source": "wordnet", "xml": None, "gold_key": None}
    assert _settings(dict(WSD)).sense_usages == WSD


CASES = {
    "no gold key": ({"source": "wsd_xml", "xml": WSD["xml"]}, "senses.usages.gold_key: missing; source 'wsd_xml'"),
    "no such file": ({**WSD, "xml": "nowhere.xml"}, "senses.usages.xml: 'nowhere.xml' is not a file"),
    "unused": ({"xml": WSD["xml"]}, "senses.usages.xml: unused with senses.usages.source 'wordnet'"),
    "unknown key": ({**WSD, "gold": "x"}, "senses.usages: unknown key(s) 'gold'; allowed: gold_key, source, xml"),
    "unknown source": ({**WSD, "source": "semcor"}, "senses.usages.source: 'semcor' is not allowed"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_usage_source_mistake_is_one_line_naming_the_key(case):
    usages, message = CASES[case]
    with pytest.raises(ConfigError) as err:
        _settings(usages)
    assert message in str(err.value), str(err.value)
    assert len(str(err.value).splitlines()) == 2, str(err.value)  # the heading and the one problem
