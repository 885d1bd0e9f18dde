"""A stage for the pipeline tests: copy SRC to DST (``--signal N``: end by signal N instead). It imports
nothing heavy, so a test's stages take tenths of a second rather than the seconds a training script
spends importing torch."""

import os
import shutil
import sys

if sys.argv[1] == "--signal":
    os.kill(os.getpid(), int(sys.argv[2]))
shutil.copyfile(sys.argv[1], sys.argv[2])
