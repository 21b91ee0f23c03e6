"""Coarse English lexical classes for token-level probes (VEDJE A.11, Table 13): function words, temporal words,
verbs. Hand-written lists, no tagger: a word is a verb when it is an inflection of a common caption verb
(`VERB_LEMMAS`, regular -s/-es/-ing/-ed forms plus the irregular ones listed), whatever its role in the sentence.

Temporal words ("then", "before", "ending", ...) are not function words here: several of them are English
stopwords in the usual lists, but the probe reports them as their own class.
"""
from __future__ import annotations

import functools

TEMPORAL_WORDS = frozenset("""
after afterwards afterward again already before begin begins began beginning during earlier end ends ended ending
eventually final finally finish finishes finished finishing first meanwhile next now once previously second soon
start starts started starting then third until when while last later continue continues continued continuing
""".split())

FUNCTION_WORDS = frozenset("""
a an the this that these those some any each every all both either neither no nor not only own same such other
another i me my myself we us our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves what which who whom whose this there here where why how
am is are was were be been being have has had having do does did doing will would shall should can could may might
must ought and but or so if because as than too very just also of at by for with about against between into through
above below to from up down in out on off over under further onto upon within without along across around behind
beside near toward towards s t don doesn isn aren wasn weren hasn haven hadn won wouldn shouldn can't couldn
""".split()) - TEMPORAL_WORDS

VERB_LEMMAS = frozenset("""
add apply arrange bake bend blend boil bounce bring brush build carry catch change chop clean climb close combine
come cook cover crack cross cut dance dice dip dive drag draw dress drink drive drop eat enter explain fall feed fill
flip float fly fold fry get give go grab grate grill hang heat help hit hold hug jump kick kiss knead laugh lay lead
lie lift light listen look make mash measure melt mix move open paint peel perform pick place plant play point pour
press pull push put race rake read remove ride rinse roll rotate rub run say scrub season serve set sew shake shoot
show shuffle sing sit skate ski slice slide smile speak spin spray spread sprinkle squeeze stand stir stretch
surf swim swing take talk teach tell throw tie touch turn twist use walk wash watch wave wear whisk wipe work wrap
write
""".split())

_IRREGULAR = frozenset("""
bent bound brought built caught came cut dealt dived dove drew drawn drank drunk drove driven ate eaten fell fallen
fed flew flown fried got gotten gave given went gone grabbed held hit kept knelt laid led lay lain lit made put ran
read rode ridden said set sewn shook shaken shot showed shown sang sung sat skated slid spoke spoken spun spread
stood swam swum swung took taken taught told threw thrown tied wore worn wrote written dipped dropped flipped hugged
mopped planted skipped stirred stopped wrapped
""".split())


def _forms(lemma: str) -> set[str]:
  stem = lemma[:-1] if lemma.endswith("e") and not lemma.endswith(("ee", "ye", "oe")) else lemma
  third = lemma + ("es" if lemma.endswith(("s", "sh", "ch", "x", "z", "o")) else "s")
  if lemma.endswith("y") and lemma[-2:-1] not in "aeiou":
    third = lemma[:-1] + "ies"
  past = (lemma[:-1] + "ied") if lemma.endswith("y") and lemma[-2:-1] not in "aeiou" else stem + "ed"
  forms = {lemma, third, stem + "ing", past}
  if lemma.endswith("ie"):
    forms.add(lemma[:-2] + "ying")
  if len(lemma) <= 4 and lemma[-1] not in "aeiouwxy" and lemma[-2] in "aeiou" and lemma[-3] not in "aeiou":
    forms |= {lemma + lemma[-1] + "ing", lemma + lemma[-1] + "ed"}  # cut -> cutting, stir -> stirring
  return forms


@functools.lru_cache(maxsize=None)
def verb_forms() -> frozenset[str]:
  """Every surface form counted as a verb."""
  return frozenset(f for lemma in VERB_LEMMAS for f in _forms(lemma)) | _IRREGULAR


def is_function_word(word: str) -> bool:
  return word.lower() in FUNCTION_WORDS


def is_temporal_word(word: str) -> bool:
  return word.lower() in TEMPORAL_WORDS


def is_verb(word: str) -> bool:
  w = word.lower()
  return w in verb_forms() and w not in TEMPORAL_WORDS and w not in FUNCTION_WORDS
