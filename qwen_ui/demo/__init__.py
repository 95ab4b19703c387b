"""The shapes demo model. :data:`WEIGHTS` holds its shipped revisions; importing this
package needs nothing beyond the standard library, so the training code (run on a device
with only torch and transformers) can find them."""

from pathlib import Path

WEIGHTS = Path(__file__).resolve().parent / "weights"
