"""Every rule's explanation (what ``tpuemb explain ID`` prints) has one shape, as ruff's rules do:
``## What it does``, ``## Why is this bad?``, ``## Example``, ``## Use instead``, in that order and
none empty, and a ``Spec: validation-rules.md section N`` line naming the catalogue section of the
rule's family (validation-rules.md section 2; PARSE001 is reserved in section 0; SparseCore's
in sparsecore.md; tpuemb plan's in docs/plan.md, its gate; tpuemb diff's checkpoint findings in
docs/diff/checkpoints.md).
"""

from __future__ import annotations

import re

import pytest

from tpuemb_cfg.rules import RULES

SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead")

#: The catalogue section of each family.
FAMILY_SECTION = {
    "PARSE": "0", "TAG": "2.1", "MODE": "2.2", "FEAT": "2.3", "TBL": "2.4", "OPT": "2.5",
    "ACC": "2.6", "CLIP": "2.7", "QNT": "2.7", "SIZE": "2.8", "DEP": "2.9", "SC": "5",
    "PLAN": "gate", "CKPT": "findings", "DIFF": "compares",
}  # fmt: skip
#: The spec page of a family whose catalogue is not validation-rules.md.
FAMILY_PAGE = {"SC": "sparsecore.md", "PLAN": "plan.md", "CKPT": "diff/checkpoints.md",
               "DIFF": "diff.md"}

SPEC = re.compile(r"^Spec: (?:validation-rules|sparsecore|plan|diff/checkpoints|diff)\.md "
                  r"section (\S+)$", re.MULTILINE)


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_doc_has_every_section_and_its_spec_section(rule_id: str) -> None:
    rule = RULES[rule_id]
    text = rule.explanation
    starts = [text.find(f"{heading}\n") for heading in SECTIONS]
    assert -1 not in starts, (rule_id, dict(zip(SECTIONS, starts, strict=True)))
    assert starts == sorted(starts), f"{rule_id}: sections out of order"
    assert starts[0] == 0, f"{rule_id}: the doc must open with {SECTIONS[0]!r}"
    ends = [*starts[1:], len(text)]
    for heading, start, end in zip(SECTIONS, starts, ends, strict=True):
        body = text[start + len(heading) : end]
        body = SPEC.sub("", body)
        assert body.strip(), f"{rule_id}: {heading!r} is empty"
    assert SPEC.findall(text) == [FAMILY_SECTION[rule.family]], rule_id
    page = FAMILY_PAGE.get(rule.family, "validation-rules.md")
    assert f"Spec: {page} section" in text, rule_id
    assert text.rstrip().splitlines()[-1].startswith("Spec: "), f"{rule_id}: Spec line last"
    assert not re.search(r"^\*\*\w", text, re.MULTILINE), f"{rule_id}: old bold heading style"
