"""The pages a user reads render as written: every relative link and image
in the Markdown docs names a file that exists and, with a '#', a heading
of that file; every table has its separator line and as many cells in each
row as in its header (GitHub's rules: an unescaped '|' splits a cell even
inside a code span), and at least one row."""

import functools
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(
    os.path.relpath(p, ROOT) for p in
    [os.path.join(ROOT, 'README.md'), os.path.join(ROOT, 'BENCHMARKS.md')]
    + glob.glob(os.path.join(ROOT, 'docs', '*.md'))
    + glob.glob(os.path.join(ROOT, 'tests', 'data', '*.md')))
FENCE = re.compile(r'^\s*```')
# [text](target) and ![alt](target); the target ends at a space or ')'.
LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)')
CODE_SPAN = re.compile(r'`[^`]*`')
SEPARATOR = re.compile(r'^\|(\s*:?-+:?\s*\|)+\s*$')


def prose_lines(path):
  """(line number, line) of a page outside its fenced code blocks."""
  with open(os.path.join(ROOT, path), encoding='utf-8') as f:
    lines = f.read().split('\n')
  fenced = False
  for number, line in enumerate(lines, 1):
    if FENCE.match(line):
      fenced = not fenced
      continue
    if not fenced:
      yield number, line


def slug(heading: str) -> str:
  """GitHub's anchor for a heading: lower case, punctuation dropped (word
  characters, spaces and hyphens kept), spaces to hyphens."""
  text = re.sub(r'[^\w\- ]', '', heading.strip().lower())
  return text.replace(' ', '-')


@functools.lru_cache(maxsize=None)
def anchors(path) -> frozenset:
  """The anchors of a page's headings; a repeated heading's second anchor
  takes '-1', its third '-2', as GitHub numbers them."""
  seen, out = {}, set()
  for _, line in prose_lines(path):
    m = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
    if not m:
      continue
    base = slug(m.group(1))
    n = seen.get(base, 0)
    seen[base] = n + 1
    out.add(base if n == 0 else f'{base}-{n}')
  return frozenset(out)


def test_the_pages_are_found():
  assert {'README.md', 'BENCHMARKS.md', 'docs/architecture.md'} <= set(PAGES)


def paragraphs(page):
  """(first line number, text) of each run of non-blank prose lines, joined
  with spaces: a link's text may wrap onto the next line."""
  block = []
  for number, line in list(prose_lines(page)) + [(None, '')]:
    if line.strip():
      block.append((number, line.strip()))
    elif block:
      yield block[0][0], ' '.join(text for _, text in block)
      block = []


@pytest.mark.parametrize('page', PAGES)
def test_every_relative_link_names_a_file_and_heading_that_exist(page):
  broken = []
  for number, text in paragraphs(page):
    for target in LINK.findall(CODE_SPAN.sub('', text)):
      if re.match(r'^[a-z][a-z0-9+.-]*:', target):
        continue  # https:, mailto: and the like
      path, _, anchor = target.partition('#')
      path = (os.path.normpath(os.path.join(os.path.dirname(page), path))
              if path else page)
      if not os.path.exists(os.path.join(ROOT, path)):
        broken.append(f'{page}:{number}: {target}: no file {path}')
      elif anchor and path.endswith('.md') and anchor not in anchors(path):
        broken.append(f'{page}:{number}: {target}: no heading #{anchor} '
                      f'in {path}')
  assert not broken, '\n'.join(broken)


def cells(row: str) -> int:
  """The cells of a table row: its unescaped '|'s, less the outer two."""
  return len(re.findall(r'(?<!\\)\|', row.strip())) - 1


def tables(page):
  """[(line number, row)] per table of a page: the lines starting with '|'
  that begin after a blank line (a '|' that continues a paragraph, as in
  '|a|', is text)."""
  out, block, previous = [], [], ''
  for number, line in list(prose_lines(page)) + [(None, '')]:
    if line.startswith('|') and (block or not previous.strip()):
      block.append((number, line))
    elif block:
      out.append(block)
      block = []
    previous = line
  return out


@pytest.mark.parametrize('page', PAGES)
def test_every_table_has_a_separator_rows_and_cells_as_its_header(page):
  broken = []
  for block in tables(page):
    first, header = block[0]
    if len(block) < 2 or not SEPARATOR.match(block[1][1]):
      broken.append(f'{page}:{first}: a table without a separator line '
                    'under its header')
    elif len(block) < 3:
      broken.append(f'{page}:{first}: a table without rows (does the line '
                    'after its separator start with "|"?)')
    width = cells(header)
    broken += [f'{page}:{n}: {cells(row)} cells, the header has {width}'
               for n, row in block[1:] if cells(row) != width]
  assert not broken, '\n'.join(broken)
