"""The knowledge-graph layer: WordNet's database format read into a graph (a mini WordNet written
here in wndb(5)'s format), surface forms and supersenses, entity linking (multi-word, inflected,
most frequent sense first, streamed), a user's own triples and their errors, save/load."""

from __future__ import annotations

import numpy as np
import pytest

from ptmkit.cli import main
from ptmkit.errors import PtmError
from ptmkit.knowledge.graph import KnowledgeGraph, surface_table
from ptmkit.knowledge.linking import STOP_WORDS, Linker, base_forms, link, link_corpus
from ptmkit.knowledge.stopwords import FUNCTION_WORDS
from ptmkit.knowledge.triples import read_graph as read_user_graph
from ptmkit.knowledge.triples import read_split
from ptmkit.knowledge.wordnet import LEXNAMES, parse_data_line, read_graph

HEADER = "  1 This software and database is being provided to you, the LICENSEE, by\n"
DATA_NOUN = [
    "00001740 03 n 01 entity 0 001 ~ 00002137 n 0000 | that which exists",
    "00002137 03 n 01 organism 0 002 @ 00001740 n 0000 ~ 00002900 n 0000 | a living thing",
    "00002900 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 003 @ 00002137 n 0000 ~ 00004000 n 0000 "
    '+ 00009000 v 0101 | a member of the genus Canis; "the dog barked all night"',
    "00004000 13 n 02 hot_dog 0 frank 0 001 @ 00005000 n 0000 | a sausage in a roll; \"he ate a hot dog\"",
    "00005000 13 n 01 sausage 0 001 ~ 00004000 n 0000 | highly seasoned minced meat",
    "00006000 18 n 02 dog 1 cad 0 000 | someone who is morally reprehensible; \"you dirty dog\"",
    "00007000 15 n 01 New_York 0 000 | the largest city in New York State",
    "00008000 05 n 01 mouse 0 000 | a small rodent",
]
DATA_VERB = [
    # a verb line ends with its frames (f_cnt + f_num w_num) after the pointers
    '00009000 38 v 01 dog 0 001 + 00002900 n 0101 01 + 08 00 | go after with the intent to catch; "the dogs dogged the rabbit"',
]
DATA_ADJ = ["00010000 00 s 01 hot(a) 0 000 | used of physical heat"]
INDEX = {
    "noun": ["canis_familiaris n 1 1 @ 1 0 00002900", "cad n 1 0 1 0 00006000", "dog n 2 2 @ ~ 2 1 00002900 00006000",
             "domestic_dog n 1 1 @ 1 0 00002900", "entity n 1 1 ~ 1 0 00001740", "frank n 1 1 @ 1 0 00004000",
             "hot_dog n 1 1 @ 1 0 00004000", "mouse n 1 0 1 0 00008000", "new_york n 1 0 1 0 00007000",
             "organism n 1 2 @ ~ 1 0 00002137", "sausage n 1 1 ~ 1 0 00005000"],
    "verb": ["dog v 1 1 + 1 0 00009000"],
    "adj": ["hot a 1 0 1 0 00010000"],
    "adv": [],
}


@pytest.fixture
def mini_wordnet(tmp_path):
    """A WordNet database directory of eleven synsets, with cntlist.rev and noun.exc."""
    wn = tmp_path / "wordnet"
    wn.mkdir()
    for name, lines in (("noun", DATA_NOUN), ("verb", DATA_VERB), ("adj", DATA_ADJ), ("adv", [])):
        (wn / f"data.{name}").write_text(HEADER + "".join(line + "  \n" for line in lines))
        (wn / f"index.{name}").write_text(HEADER + "".join(line + "  \n" for line in INDEX[name]))
    (wn / "cntlist.rev").write_text("dog%1:05:00:: 1 42\ndog%2:38:00:: 1 2\n")
    (wn / "noun.exc").write_text("mice mouse\n")
    return wn


def test_data_line_fields():
    key, lex, ss_type, words, pointers = parse_data_line(DATA_VERB[0] + "  \n")
    assert (key, LEXNAMES[lex], ss_type, words) == ("00009000-v", "verb.motion", "v", ["dog"])
    assert pointers == [("+", "00002900-n", "0101")]  # the frames after the pointer are not pointers
    assert parse_data_line(DATA_ADJ[0])[3] == ["hot"]  # the (a) position marker is dropped
    assert parse_data_line(HEADER) is None
    with pytest.raises(PtmError, match="not a WordNet data line"):
        parse_data_line("00001740 03 n 02 entity 0 001 ~ 00002137 n 0000 | cut short")


def test_wordnet_graph(mini_wordnet):
    kg = read_graph(mini_wordnet)
    assert kg.num_entities == 10 and len(kg.supersense_names) == 45
    dog = kg.entity_id("00002900-n")
    assert kg.supersense_names[kg.supersense[dog]] == "noun.animal"
    assert kg.supersense_names[kg.supersense[kg.entity_id("00009000-v")]] == "verb.motion"
    assert kg.labels[dog] == "dog.n.01" and kg.labels[kg.entity_id("00006000-n")] == "dog.n.02"
    # senses by tag count (dog.n.01: 42, dog.v.01: 2, dog.n.02: 0), ties in index order
    assert [kg.entities[e] for e in kg.candidates("dog")] == ["00002900-n", "00009000-v", "00006000-n"]
    assert kg.surface_counts[kg.surface_offsets[kg.surface_id("dog")]] == 42
    assert [kg.entities[e] for e in kg.candidates("Hot_Dog")] == ["00004000-n"]
    triples = {(kg.entities[h], kg.relations[r], kg.entities[t]) for h, r, t in kg.triples}
    assert ("00002900-n", "_hypernym", "00002137-n") in triples
    assert ("00002137-n", "_hyponym", "00002900-n") in triples
    assert ("00009000-v", "_derivationally_related_form", "00002900-n") in triples  # a lexical pointer
    assert len(triples) == len(kg.triples) == 9
    assert kg.exceptions == {"mice": ["mouse"]}


def test_save_load_round_trip(mini_wordnet, tmp_path):
    kg = read_graph(mini_wordnet)
    back = KnowledgeGraph.load(kg.save(tmp_path / "graph"))
    assert back.entities == kg.entities and back.surfaces == kg.surfaces and back.labels == kg.labels
    np.testing.assert_array_equal(back.triples, kg.triples)
    np.testing.assert_array_equal(back.surface_entities, kg.surface_entities)
    np.testing.assert_array_equal(back.supersense, kg.supersense)
    with pytest.raises(PtmError, match="graph.npz is missing"):
        KnowledgeGraph.load(tmp_path)


def test_linking_multiword_inflected_most_frequent_first(mini_wordnet):
    kg = read_graph(mini_wordnet)
    words = "Two hot dogs in New York , the mice and a dog".split()
    links = link(words, kg)
    spans = [(" ".join(words[s:e]), kg.entities[links.candidates(k)[0]])
             for k, (s, e) in enumerate(zip(links.starts, links.ends))]
    assert spans == [("hot dogs", "00004000-n"), ("New York", "00007000-n"), ("mice", "00008000-n"),
                     ("dog", "00002900-n")]  # "hot" alone loses to the longer "hot dog"
    ids = links.entity_per_word(len(words))
    assert ids.dtype == np.int32 and ids.tolist()[:6] == [-1, kg.entity_id("00004000-n"), kg.entity_id("00004000-n"), -1,
                                                          kg.entity_id("00007000-n"), kg.entity_id("00007000-n")]
    assert link(["hot"], kg).candidates(0).tolist() == [kg.entity_id("00010000-a")]
    long = link(["dog" * 40, "dog", "sausage" + "s" * 60], kg)  # tokens longer than any graph word are cut, never matched
    assert long.starts.tolist() == [1] and Linker(kg).width == len("familiaris") + 6


FUNCTION_NOUNS = [  # WordNet's entries for function words, and phrases that start or end with one
    "00100000 23 n 03 angstrom 0 angstrom_unit 0 A 0 000 | a metric unit of length",
    "00200000 23 n 02 inch 0 in 0 000 | a unit of length",
    "00300000 27 n 02 beryllium 0 Be 0 000 | a light strong brittle grey toxic bivalent metallic element",
    "00400000 09 n 02 information_technology 0 IT 0 000 | the branch of engineering that deals with computers",
    "00500000 06 n 01 house 0 000 | a dwelling that serves as living quarters",
    "00600000 05 n 01 dog 0 000 | a member of the genus Canis",
    "00700000 04 n 01 a_cappella_singing 0 000 | singing without instrumental accompaniment",
]
FUNCTION_ADJS = ["00800000 01 a 01 in_vitro 0 000 | in an artificial environment outside the living organism"]
FUNCTION_VERBS = ["00900000 40 v 01 give_up 0 000 01 + 08 00 | give up, as of something"]


@pytest.fixture
def function_words(tmp_path):
    """A graph naming ``a``, ``in``, ``be`` and ``it``, as WordNet does (``is``: ``be`` by the
    exception list), beside dog, house and phrases."""
    wn = tmp_path / "wordnet-fw"
    wn.mkdir()
    data = {"noun": FUNCTION_NOUNS, "verb": FUNCTION_VERBS, "adj": FUNCTION_ADJS, "adv": []}
    for name, lines in data.items():
        index = sorted(f"{w.lower()} {line.split()[2]} 1 0 1 0 {line.split()[0]}"
                       for line in lines for w in line.split(" | ")[0].split()[4 : 4 + 2 * int(line.split()[3], 16) : 2])
        (wn / f"data.{name}").write_text(HEADER + "".join(line + "  \n" for line in lines))
        (wn / f"index.{name}").write_text(HEADER + "".join(line + "  \n" for line in index))
    (wn / "verb.exc").write_text("is be\n")
    return read_graph(wn)


def _spans(words: list[str], linker: Linker) -> list[tuple[str, str]]:
    links = linker.link(words)
    return [(" ".join(words[s:e]), linker.graph.labels[links.candidates(k)[0]]) for k, (s, e) in enumerate(zip(links.starts, links.ends))]


def test_function_words_are_not_linked_alone(function_words, tmp_path):
    kg = function_words
    linker = Linker(kg)
    assert {"a", "in", "the", "it", "i", "be", "is", "us", "who", "and", "can"} <= STOP_WORDS == FUNCTION_WORDS
    assert "dog" not in STOP_WORDS and "house" not in STOP_WORDS
    assert _spans("a dog in the house".split(), linker) == [("dog", "dog.n.01"), ("house", "house.n.01")]
    assert _spans("A Dog IN the House it is".split(), linker) == [("Dog", "dog.n.01"), ("House", "house.n.01")]
    # a multi-word surface starting or ending with a function word still links
    assert _spans("a cappella singing in vitro , give up".split(), linker) == [
        ("a cappella singing", "a_cappella_singing.n.01"), ("in vitro", "in_vitro.a.01"), ("give up", "give_up.v.01")]
    everything = Linker(kg, stop_words=())  # the list off: every surface links, as before it
    assert _spans("a dog in the house it is".split(), everything) == [
        ("a", "angstrom.n.01"), ("dog", "dog.n.01"), ("in", "inch.n.01"), ("house", "house.n.01"),
        ("it", "information_technology.n.01"), ("is", "beryllium.n.01")]  # "is" -> "i" + ... -> "be"? no: base "is" -> none
    assert _spans("a dog".split(), Linker(kg, stop_words=["DOG"])) == [("a", "angstrom.n.01")]  # a list of one's own
    text = tmp_path / "fw.txt"
    text.write_text("a dog in the house\nin vitro\n")
    dog, house, vitro = (kg.entity_id(k) for k in ("00600000-n", "00500000-n", "00800000-a"))
    assert link_corpus(text, kg).entities.tolist() == [-1, dog, -1, -1, house, vitro, vitro]
    assert link_corpus(text, everything).entities.tolist()[:3] == [kg.entity_id("00100000-n"), dog, kg.entity_id("00200000-n")]


def test_base_forms_follow_morphy():
    assert base_forms("mice", {"mice": ["mouse"]})[0] == "mouse"
    assert "dog" in base_forms("dogs", {}) and "dog" in base_forms("dogged", {}) and "box" in base_forms("boxes", {})
    assert "city" in base_forms("cities", {})


def test_link_corpus_streams_and_respects_lines(mini_wordnet, tmp_path, caplog):
    kg = read_graph(mini_wordnet)
    text = tmp_path / "corpus.txt"
    text.write_text("he ate a hot\ndog today\n" * 3 + "the new york sausage\n")
    linker = Linker(kg)
    got = link_corpus(text, linker, chunk_words=4)  # several chunks
    whole = link_corpus(text.read_text().splitlines(), linker)
    np.testing.assert_array_equal(got.entities, whole.entities)
    hot, dog = kg.entity_id("00010000-a"), kg.entity_id("00002900-n")
    # "hot" / "dog" on two lines are not the multi-word "hot dog"
    assert got.entities[:6].tolist() == [-1, -1, -1, hot, dog, -1]
    assert got.entities[-4:].tolist() == [-1, kg.entity_id("00007000-n"), kg.entity_id("00007000-n"), kg.entity_id("00005000-n")]
    assert got.warnings == 0
    np.testing.assert_array_equal(np.load(got.save(tmp_path / "links.npy")), got.entities)
    caplog.set_level("WARNING")
    none = link_corpus(["le chat noir"], linker)
    assert none.warnings == 1 and "matched nothing" in caplog.text and (none.entities == -1).all()


def test_user_graph_and_errors(tmp_path):
    triples = tmp_path / "kg.tsv"
    triples.write_text("# my graph\nparis\tcapital_of\tfrance\nlyon\tcity_in\tfrance\n\n")
    surfaces = tmp_path / "surfaces.tsv"
    surfaces.write_text("Paris\tparis\nCity of Light\tparis\nparis\tlyon\n")
    kg = read_user_graph(triples, surfaces)
    assert kg.entities == ["paris", "france", "lyon"] and kg.relations == ["capital_of", "city_in"]
    assert [kg.entities[e] for e in kg.candidates("paris")] == ["paris", "lyon"]  # file order is the prior
    assert link("we saw the city of light".split(), kg).candidates(0).tolist() == [0]
    bad = tmp_path / "bad.tsv"
    bad.write_text("paris\tcapital_of\tfrance\nlyon city_in france\n")
    with pytest.raises(PtmError, match=r"bad.tsv:2: expected 3 non-empty tab-separated fields"):
        read_user_graph(bad)
    with pytest.raises(PtmError, match=r"kg.tsv:3: unknown relation 'city_in'"):
        read_user_graph(triples, relations=["capital_of"])
    surfaces.write_text("Paris\tparis\nRome\trome\n")
    with pytest.raises(PtmError, match=r"surfaces.tsv:2: entity 'rome' is in no triple"):
        read_user_graph(triples, surfaces)
    split = read_split(triples, None, triples)
    assert len(split.valid) == 0 and len(split.test) == 2


def test_surface_table_orders_by_count_then_first_seen():
    surfaces, offsets, entities, counts = surface_table([("b", 1, 0.0), ("a", 2, 1.0), ("b", 3, 5.0), ("b", 4, 0.0), ("b", 1, 9.0)])
    assert surfaces == ["a", "b"] and offsets.tolist() == [0, 1, 4]
    assert entities.tolist() == [2, 3, 1, 4] and counts.tolist() == [1.0, 5.0, 0.0, 0.0]


def test_link_corpus_reads_a_prepared_corpus_like_its_text(mini_wordnet, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("he ate two hot dogs in new york\nthe mice ran to a dog\nhot\ndog sausage\n" * 20)
    assert main(["tokenizer", "train", str(text), "--vocab-size", "80", "--min-frequency", "1", "-o", str(tmp_path / "tok.json")]) == 0
    assert main(["prepare", str(text), "-t", str(tmp_path / "tok.json"), "-o", str(tmp_path / "corpus")]) == 0
    kg = read_graph(mini_wordnet)
    from_corpus = link_corpus(tmp_path / "corpus", kg, chunk_words=10)  # words decoded from word pieces, in chunks
    from_text = link_corpus(text, kg)
    np.testing.assert_array_equal(from_corpus.entities, from_text.entities)
    assert from_corpus.spans == from_text.spans == 20 * 7  # hot dogs, new york, mice, dog, hot, dog, sausage
