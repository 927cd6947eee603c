"""Studies of a changing corpus (issue 18). ``python -m studies update-study``: the maintenance table on synthetic facts
(:mod:`.study`; its entity groups :mod:`.groups`, QA and provenance scores :mod:`.scoring`, report :mod:`.report`,
other update recipes :mod:`.variants`, recipes on a finished study's first run :mod:`.sweep`, repeats over seeds
:mod:`.seeds`). ``python -m studies update-text``: a text run updated with unseen text (:mod:`.text`)."""
