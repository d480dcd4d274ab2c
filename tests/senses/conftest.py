"""The WordNet 3.0 copy the senses tests share: fetched once per session (a 31.6 MB download, about 15 s)."""

import pytest


@pytest.fixture(scope="session")
def wordnet_root(tmp_path_factory):
    from contextuality.senses.wordnet import fetch_wordnet

    root = tmp_path_factory.mktemp("wordnet")
    fetch_wordnet(root)
    return root


@pytest.fixture(scope="session")
def wordnet(wordnet_root):
    from contextuality.senses.wordnet import load_wordnet

    return load_wordnet(wordnet_root)
