"""The boundary: every file, folder and URL a user is handed is read here, and every folder a user names is
written here. Nothing else in the project opens, decodes, copies or fetches a user's path (``tests/
test_boundary.py`` holds every module to it).

- ``files``: a regular file only (no FIFO, device or socket), no larger than its limit, as bytes, text, JSON, YAML;
- ``folders``: paths an annotation file names stay inside their folder; a handed folder's links are not followed;
- ``images``: the pixel limit from the header, as the decoder reads it, and again on the decoded image;
- ``writes``: new files renamed over their names, never written through a link;
- ``urls``: remote data from https, http, s3 and gs only, no shell, a byte limit;
- ``cache``: the user's own private cache folder;
- ``limits``: the limits and their environment variables.

Importing this package sets OpenCV's pixel limit to the project's before OpenCV loads (it reads it only then).
"""

from datamodules.boundary.limits import cap_decoders

cap_decoders()
