"""Rank 3 fails under torch's @record, which writes TORCHELASTIC_ERROR_FILE;
the other ranks wait to be stopped."""
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


def load(rank):
    if rank == 3:
        raise RuntimeError(f"boom from rank {rank}")


@record
def main():
    rank = int(os.environ["RANK"])
    load(rank)
    time.sleep(1000)


if __name__ == "__main__":
    main()
