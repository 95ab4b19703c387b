"""``qwen-ui batch``: many questions from a file, answered by the local engine or a server
(rows in :mod:`.rows`, who answers in :mod:`.askers`, the run in :mod:`.runner`, the
resumable output in :mod:`.output`)."""
