#!/usr/bin/env python3
"""Cards sized to their text (python-pptx): KPI cards, content cards, comparison panels and the
takeaway panel used to be drawn at a fixed share of the body (70-100 %) whatever they held, so a
short text filled half the card and left the rest empty.

Now the text is set as large as the card allows (up to `CARD_TEXT_SIZES`, never above the title
size - 2) and the card is then made as tall as its text needs, so the text covers about
`CARD_SHARE` of it; a block of cards shorter than the body is centred in it (balanced, not pinned
under the title with an empty lower half). The checker's `card-fill` rule (deck_space.card_fill)
reports a card whose text still covers under half of it.
"""

from __future__ import annotations

from pptx.util import Inches

CARD_TEXT_SIZES = (24, 22, 20, 18, 16)
CARD_SHARE = 0.75   # text covers about this share of a card sized to it
MIN_CARD_H = Inches(0.9)  # a one-line takeaway is a callout, not a column


def card_sizes(deck, top: float = 24) -> tuple[int, ...]:
    """Text sizes to try in a card, largest first: at most `top` and 2 pt under the title."""
    return tuple(z for z in CARD_TEXT_SIZES if z <= min(top, deck.last_title_size - 2)) or (16,)


def card_height(content: int, limit: int, share: float = CARD_SHARE) -> int:
    """A card's height for content `content` EMU tall: the content covers `share` of it, within
    MIN_CARD_H .. limit."""
    return int(min(limit, max(MIN_CARD_H, content / share)))


def centred_top(deck, block_h: int) -> int:
    """The top of a block `block_h` tall centred in the body."""
    return deck.body_top + max(0, (deck.body_h - block_h) // 2)
