"""Errors of the writer.

WriterError
 ├── RaceLost                  retriable: a concurrent change beat the batch; decide it again
 ├── DeadLetterUndelivered     retriable: some dead letters got no acknowledgement yet
 └── RetriesExhausted          fatal: a step kept failing past its attempts or time budget;
                               the process exits without committing the batch's offsets, so
                               the batch is delivered again after the restart
"""

from __future__ import annotations


class WriterError(Exception):
    retriable = False


class RaceLost(WriterError):
    retriable = True


class DeadLetterUndelivered(WriterError):
    retriable = True


class RetriesExhausted(WriterError):
    retriable = False

    def __init__(self, step: str, attempts: int, last: BaseException) -> None:
        super().__init__(f"{step}: gave up after {attempts} attempts: {last!r}")
        self.step = step
        self.attempts = attempts
