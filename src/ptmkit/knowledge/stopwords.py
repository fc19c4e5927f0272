"""English function words that a lexical knowledge graph lists with a content sense.

WordNet holds ``a`` (the ångström unit, vitamin A, the blood group), ``in`` (the inch, Indiana),
``it`` (information technology), ``i`` (iodine), ``be`` (beryllium), ``am`` (americium), ``or``
(Oregon), ``us`` (the United States) ...: linked by surface form, nearly every sentence would
carry those entities.  Determiners, pronouns, prepositions, conjunctions and auxiliaries are not
linked or aligned to an entity on their own; a multi-word surface that starts with one
(``a cappella``, ``in vitro``) still is.
"""

from __future__ import annotations

FUNCTION_WORDS = frozenset("""
a an the this that these those some any no every each either neither all both half such what which whose
i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it its itself
we us our ours ourselves they them their theirs themselves one ones who whom whoever whatever whichever
about above across after against along amid among around as at before behind below beneath beside besides
between beyond but by despite down during except for from in inside into like near of off on onto out outside
over past per since than through throughout till to toward towards under underneath unlike until up upon via
with within without
and or nor so yet if because although though while whereas unless whether when where whenever wherever how why
am is are was were be been being do does did done doing have has had having
can could may might must shall should will would ought
not n't 's 'm 're 've 'd 'll
there here then thus also too very just only even
""".split())

__all__ = ["FUNCTION_WORDS"]
