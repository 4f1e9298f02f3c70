"""A planted corpus, made from a seeded RNG: distinct English prose, exact copies,
near-duplicate clusters, pairs just below the Jaccard threshold, other languages, junk
for every quality rule, and PII of every kind (with look-alikes that must stay)."""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from contracts.text_pipeline import PiiKind

ADJ = [
    "quiet",
    "bright",
    "narrow",
    "ancient",
    "sudden",
    "gentle",
    "heavy",
    "golden",
    "distant",
    "hollow",
    "silver",
    "rapid",
    "bitter",
    "careful",
    "crowded",
    "dusty",
    "eager",
    "fragile",
    "hidden",
    "humble",
    "icy",
    "jagged",
    "lively",
    "modest",
    "nervous",
    "patient",
    "restless",
    "rusty",
    "sacred",
    "shallow",
    "steady",
    "tender",
    "vivid",
    "wary",
    "wicked",
    "young",
    "amber",
    "brisk",
    "clumsy",
    "damp",
    "faint",
    "grim",
    "hazy",
    "keen",
    "loyal",
    "mellow",
    "noble",
    "plain",
    "proud",
    "rough",
    "shy",
    "sleek",
    "sober",
    "spare",
    "stern",
    "swift",
    "tame",
    "tidy",
    "vast",
    "weary",
    "windy",
    "woven",
]
NOUN = [
    "harbor",
    "lantern",
    "meadow",
    "river",
    "engine",
    "tower",
    "merchant",
    "violin",
    "garden",
    "glacier",
    "library",
    "orchard",
    "pilgrim",
    "quarry",
    "saddle",
    "tunnel",
    "valley",
    "wagon",
    "beacon",
    "canyon",
    "cellar",
    "chapel",
    "compass",
    "cottage",
    "crater",
    "desert",
    "ferry",
    "forest",
    "fountain",
    "furnace",
    "gallery",
    "harvest",
    "island",
    "kettle",
    "ladder",
    "market",
    "mirror",
    "monastery",
    "needle",
    "palace",
    "pasture",
    "pillar",
    "prairie",
    "railway",
    "ribbon",
    "satchel",
    "shelter",
    "signal",
    "spindle",
    "stable",
    "statue",
    "summit",
    "tavern",
    "thicket",
    "timber",
    "vessel",
    "village",
    "vineyard",
    "workshop",
    "anchor",
    "barrel",
    "basket",
    "blanket",
    "bridge",
    "candle",
    "carpet",
    "chimney",
    "cloak",
    "courtyard",
    "drum",
    "falcon",
    "fiddle",
    "harp",
    "hammer",
    "helmet",
    "journal",
    "kitchen",
    "lake",
    "mill",
    "mountain",
    "notebook",
    "oven",
    "parcel",
    "pond",
    "quilt",
    "rooftop",
    "sail",
    "scroll",
    "shovel",
    "spear",
]
VERB = [
    "guards",
    "carries",
    "watches",
    "follows",
    "repairs",
    "paints",
    "gathers",
    "crosses",
    "measures",
    "shelters",
    "borrows",
    "polishes",
    "questions",
    "remembers",
    "sketches",
    "surrounds",
    "trades",
    "warms",
    "weighs",
    "welcomes",
    "admires",
    "balances",
    "climbs",
    "counts",
    "describes",
    "examines",
    "feeds",
    "greets",
    "inspects",
    "lifts",
    "marks",
    "observes",
    "praises",
    "protects",
    "pulls",
    "pushes",
    "reaches",
    "records",
    "sorts",
    "studies",
    "tests",
    "visits",
]
NAME = [
    "Amara",
    "Bastien",
    "Celia",
    "Dmitri",
    "Elena",
    "Farid",
    "Greta",
    "Hiro",
    "Imani",
    "Jonas",
    "Kavya",
    "Lorenzo",
    "Mirela",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosa",
    "Soren",
    "Talia",
    "Umar",
    "Vera",
    "Wren",
    "Xavier",
    "Yusuf",
    "Zora",
]
TEMPLATES = (
    "The {a} {n} {v} the {n2} near the {a2} {n3}.",
    "{N} {v} a {a} {n} and the {n2} of the {n3}.",
    "In the {a} {n}, {N} {v} the {n2} with a {a2} {n3}.",
    "Every {a} {n} that {v} the {n2} must be {a2} to the {n3}.",
    "{N} said that the {n} {v} a {a} {n2} before the {n3} was {a2}.",
    "Nobody knew why the {a} {n} {v} the {n2} of {N} with such {a2} care.",
    "After the {n} {v} the {a} {n2}, {N} and the {n3} have gone to the {a2} {n4}.",
)
GERMAN = (
    "Der alte Bahnhof liegt am Rand der kleinen Stadt und wird kaum noch benutzt.",
    "Im Winter frieren die Seen zu, und die Kinder laufen jeden Nachmittag Schlittschuh.",
    "Meine Großmutter backt sonntags einen Kuchen mit Äpfeln aus dem eigenen Garten.",
    "Die Bibliothek öffnet erst um zehn Uhr, deshalb warten wir im Café gegenüber.",
    "Nach dem langen Regen waren die Wege im Wald schlammig und schwer zu begehen.",
    "Der Zug nach München hatte wieder einmal eine Verspätung von zwanzig Minuten.",
    "Wir haben beschlossen, im Sommer mit dem Fahrrad an der Küste entlang zu fahren.",
    "Die Nachbarn streiten sich seit Jahren über die Höhe der Hecke zwischen den Gärten.",
)
FRENCH = (
    "La vieille gare se trouve au bord de la petite ville et ne sert presque plus.",
    "Chaque matin, le boulanger du quartier ouvre sa boutique avant le lever du soleil.",
    "Nous avons passé nos vacances dans un village de montagne où il pleuvait sans cesse.",
    "Le musée expose une collection de tableaux que personne n'avait vue depuis un siècle.",
    "Les enfants jouaient dans la cour pendant que leurs parents préparaient le dîner.",
    "Après la réunion, elle est rentrée chez elle à pied en longeant la rivière.",
    "Le marché du samedi attire des gens de toute la région pour ses fromages.",
    "Il faut réserver une table longtemps à l'avance dans ce restaurant très connu.",
)
SPANISH = (
    "La antigua estación está en las afueras del pueblo y casi nadie la utiliza ya.",
    "Cada mañana el panadero del barrio abre su tienda antes de que salga el sol.",
    "Pasamos las vacaciones en un pueblo de montaña donde llovía todos los días.",
    "El museo muestra una colección de cuadros que nadie había visto en un siglo.",
    "Los niños jugaban en el patio mientras sus padres preparaban la cena en la cocina.",
    "Después de la reunión, ella volvió a casa caminando a lo largo del río.",
    "El mercado de los sábados atrae a gente de toda la región por sus quesos.",
    "Hay que reservar una mesa con mucha antelación en este restaurante tan famoso.",
)

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----"
)


@dataclass
class Planted:
    """What was planted where: texts by label, and the expected outcome."""

    unique: list[str] = field(default_factory=list)
    clusters: list[list[str]] = field(default_factory=list)
    below_pairs: list[tuple[str, str]] = field(default_factory=list)
    exact_copies: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    junk: dict[str, str] = field(default_factory=dict)
    pii: dict[PiiKind, list[str]] = field(default_factory=dict)
    lookalikes: list[str] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)
    """text -> doc id (first occurrence)."""

    @property
    def expected_kept(self) -> int:
        return len(self.unique) + len(self.clusters) + 2 * len(self.below_pairs)


def sentence(rng: random.Random) -> str:
    return rng.choice(TEMPLATES).format(
        a=rng.choice(ADJ),
        a2=rng.choice(ADJ),
        n=rng.choice(NOUN),
        n2=rng.choice(NOUN),
        n3=rng.choice(NOUN),
        n4=rng.choice(NOUN),
        v=rng.choice(VERB),
        N=rng.choice(NAME),
    )


def prose_sentences(rng: random.Random, n: int) -> list[str]:
    return [sentence(rng) for _ in range(n)]


def layout(sentences: list[str]) -> str:
    """Three sentences a line, two lines a paragraph."""
    lines = [" ".join(sentences[i : i + 3]) for i in range(0, len(sentences), 3)]
    paragraphs = ["\n".join(lines[i : i + 2]) for i in range(0, len(lines), 2)]
    return "\n\n".join(paragraphs)


def edit_words(text: str, rng: random.Random, edits: int) -> str:
    """A near-duplicate: `edits` single-word substitutions, insertions or deletions."""
    words = text.split(" ")
    for _ in range(edits):
        i = rng.randrange(1, len(words) - 1)
        op = rng.choice(("sub", "ins", "del"))
        if op == "sub":
            words[i] = rng.choice(NOUN)
        elif op == "ins":
            words.insert(i, rng.choice(ADJ))
        else:
            del words[i]
    return " ".join(words)


def _foreign(rng: random.Random, pool: tuple[str, ...]) -> str:
    picked = [rng.choice(pool) for _ in range(12)]
    return layout(picked)


def _junk(rng: random.Random) -> dict[str, str]:
    prose = layout(prose_sentences(rng, 18))
    return {
        "lorem": prose + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
        "curly": prose + "\nThe config reads function main() { return 42; } in the end.",
        "short": "Too short to be a document.",
        "bullets": "\n".join(
            f"- {rng.choice(ADJ)} {rng.choice(NOUN)} item number {i}." for i in range(60)
        ),
        "repeated_lines": "\n".join(["The same line appears here again and again forever."] * 40),
        "hashes": " ".join(f"#{rng.choice(NOUN)} #{rng.choice(ADJ)} and the" for _ in range(60)),
        "no_punctuation": "\n".join(
            " ".join(rng.choice(NOUN) for _ in range(12)) for _ in range(20)
        ),
        "numbers": "\n".join(
            " ".join(str(rng.randrange(10**6)) for _ in range(10)) + " the and of."
            for _ in range(20)
        ),
    }


def _pii(rng: random.Random) -> dict[PiiKind, list[str]]:
    def key(chars: str, n: int) -> str:
        return "".join(rng.choice(chars) for _ in range(n))

    upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+"
    alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return {
        "email": [
            f"{rng.choice(NAME).lower()}.{rng.choice(NOUN)}{i}@{rng.choice(NOUN)}-mail.example.com"
            for i in range(8)
        ]
        + ["ops+alerts@corp.example.org", "X_Y@sub.domain.co.uk"],
        "phone": [
            "(555) 123-4567",
            "555-867-5309",
            "555.201.3344",
            "+1 415 555 0132",
            "+1-212-555-0199",
            "+44 20 7946 0958",
            "+49 30 12345678",
            "+33 1 23 45 67 89",
            "+81 3-1234-5678",
            "+61 2 9876 5432",
        ],
        "ipv4": [
            ".".join(
                str(rng.randrange(lo, hi)) for lo, hi in ((1, 224), (0, 256), (0, 256), (1, 255))
            )
            for _ in range(7)
        ]
        + ["10.0.0.7", "192.168.1.20", "255.255.255.0"],
        "ipv6": [
            "2001:db8:85a3::8a2e:370:7334",
            "fe80::1ff:fe23:4567:890a",
            "2001:0db8:0000:0000:0000:ff00:0042:8329",
            "::1",
            "2606:4700:4700::1111",
        ],
        "aws_access_key": [f"AKIA{key(upper, 16)}" for _ in range(3)]
        + [f"ASIA{key(upper, 16)}" for _ in range(2)],
        "aws_secret_key": [key(b64, 40) for _ in range(4)],
        "private_key": [PEM],
        "api_key": [
            f"ghp_{key(alnum, 36)}",
            f"xoxb-{key('0123456789', 12)}-{key(alnum, 24)}",
            f"sk_live_{key(alnum, 24)}",
            f"AIza{key(alnum, 35)}",
            f"hf_{key(alnum, 34)}",
        ],
    }


def _pii_sentence(kind: str, value: str) -> str:
    if kind == "aws_secret_key":
        return f"The leaked config had aws_secret_access_key = {value} in plain sight."
    if kind == "private_key":
        return f"Someone pasted this by mistake: {value} and nobody noticed it."
    if kind == "api_key":
        return f"The token {value} was committed to the repository by accident."
    return f"For questions the team can be reached at {value} during the week."


LOOKALIKES = (
    "The release 1.2.3.4-beta fixed the parser, and v10.0.0.1 followed it.",
    "Section 1.2.3.4.5 of the manual describes the 999.1.1.1 placeholder.",
    "The meeting ran from 12:30:45 to the end, and std::vector was mentioned.",
    "The invoice 2024-01-15 covered order 12345678 and the sum of 4,500.",
)


def build(root: Path, seed: int = 7) -> Planted:
    rng = random.Random(seed)
    planted = Planted()
    docs_a: list[str] = []  # -> a/part-0.jsonl, the first ids
    docs_gz: list[str] = []  # -> a/part-1.jsonl.gz
    docs_pq: list[str] = []  # -> b/rows.parquet

    for _ in range(260):
        planted.unique.append(layout(prose_sentences(rng, 18)))
    docs_a.extend(planted.unique)

    for _ in range(30):
        head = layout(prose_sentences(rng, 24))
        members = [head] + [
            edit_words(head, rng, rng.randint(1, 3)) for _ in range(rng.randint(1, 3))
        ]
        planted.clusters.append(members)
        docs_a.append(head)
        docs_pq.extend(members[1:])

    for _ in range(12):
        sents = prose_sentences(rng, 24)
        other = list(sents)
        for i in rng.sample(range(24), 4):  # ~1/6 of the sentences replaced
            other[i] = sentence(rng)
        pair = (layout(sents), layout(other))
        planted.below_pairs.append(pair)
        docs_a.append(pair[0])
        docs_gz.append(pair[1])

    # Exact copies of unique documents; one differs only in full-width letters and spaces,
    # which NFKC and whitespace collapsing fold away.
    for text in rng.sample(planted.unique[:200], 20):
        planted.exact_copies.append(text)
        docs_gz.append(text)
    variant = planted.unique[0].replace("The ", "\uff34\uff48\uff45  ", 1)
    planted.exact_copies.append(variant)
    docs_pq.append(variant)

    for pool in (GERMAN, FRENCH, SPANISH):
        for _ in range(6):
            planted.foreign.append(_foreign(rng, pool))
    docs_gz.extend(planted.foreign)

    planted.junk = _junk(rng)
    docs_pq.extend(planted.junk.values())

    planted.pii = _pii(rng)
    for kind, values in planted.pii.items():
        for value in values:
            sents = prose_sentences(rng, 18)
            sents.insert(rng.randrange(3, 15), _pii_sentence(kind, value))
            text = layout(sents)
            planted.unique.append(text)
            docs_a.append(text)
    for look in LOOKALIKES:
        sents = prose_sentences(rng, 18)
        sents.insert(6, look)
        text = layout(sents)
        planted.unique.append(text)
        planted.lookalikes.append(look)
        docs_a.append(text)

    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    offset = 0
    with (root / "a" / "part-0.jsonl").open("wb") as f:
        for i, text in enumerate(docs_a):
            line = (json.dumps({"text": text, "id": i}) + "\n").encode()
            planted.ids.setdefault(text, f"a/part-0.jsonl@{offset:012d}")
            f.write(line)
            offset += len(line)
        f.write(b"not json at all\n")
    offset = 0
    with gzip.open(root / "a" / "part-1.jsonl.gz", "wb") as f:
        for text in docs_gz:
            line = (json.dumps({"text": text}) + "\n").encode()
            planted.ids.setdefault(text, f"a/part-1.jsonl.gz@{offset:012d}")
            f.write(line)
            offset += len(line)
    table = pa.table(
        {"text": docs_pq, "url": [f"https://example.com/{i}" for i in range(len(docs_pq))]}
    )
    pq.write_table(table, root / "b" / "rows.parquet", row_group_size=16)
    for j, text in enumerate(docs_pq):
        planted.ids.setdefault(text, f"b/rows.parquet#{j:012d}")
    return planted
