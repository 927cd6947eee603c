"""Studies of a changing corpus (issue 18): the maintenance table on synthetic facts (``mlpmem update-study``:
:mod:`.study`, its report :mod:`.report`, other update recipes :mod:`.variants` and on a finished study's first run
:mod:`.sweep`) and an update of a text run with unseen text (``mlpmem update-text``: :mod:`.text`)."""
