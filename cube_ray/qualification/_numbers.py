"""Numbers in an answer: where they are, what they mean, a plausible other value.

A *number token* is a phone number (``020-34121084``, a mobile number, a bare
7-8 digit subscriber number), an Arabic number (half- or full-width digits,
optionally with a decimal part) or a Chinese numeral followed by a unit
(``二十个工作日``, ``三日``, ``五百元``). Date parts (``2021年3月5日``) are separate
tokens whose replacements stay valid dates. Digits inside URLs, codes and
identifiers (next to a Latin letter, ``/``, ``#``, ``_``, ``=``) are not numbers
a reader would check, and are not tokens.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

__all__ = [
    "NumberToken",
    "chinese_to_int",
    "int_to_chinese",
    "number_tokens",
    "number_values",
    "plausible_other",
]

_FULL = "０１２３４５６７８９"
_TO_HALF = str.maketrans(_FULL + "．－", "0123456789.-")
_TO_FULL = str.maketrans("0123456789", _FULL)
_D = "0-9０-９"
_CN_DIGITS = "零〇一二两三四五六七八九"
_CN_UNITS = "十百千万"
_UNITS = (
    r"个工作日|工作日|个自然日|自然日|个月|个小时|小时"
    r"|日|天|月|年|周|元|万元|次|份|项|人|岁|分钟"
)
_TOKEN = re.compile(
    rf"(?P<phone>(?<![{_D}])(?:[{_D}]{{3,4}}[-－][{_D}]{{5,8}}|1[3-9][0-9]{{9}}"
    rf"|[{_D}]{{7,8}}|12[0-9]{{3}})(?![{_D}.．]))"
    rf"|(?P<arabic>(?<![{_D}.．,])(?:[0-9]{{1,3}}(?:,[0-9]{{3}})+|[{_D}]+)"
    rf"(?:[.．][{_D}]+)?(?![{_D}]|,[0-9]{{3}}))"
    rf"|(?P<chinese>[{_CN_DIGITS}{_CN_UNITS}]+(?=(?:{_UNITS}))(?!次性))"
)
_IDENT = re.compile(r"[A-Za-z/#_=?&%@]")
"""A neighbour that makes digits part of a URL, code or identifier."""
_URL = re.compile(r"(?:https?://|www\.)\S+")
_LIST_MARKER = re.compile(r"(?:^|\n)[ \t]*$")
"""What precedes the number of a numbered list item (``1.``, ``2、``)."""


@dataclass(frozen=True)
class NumberToken:
    """One number in a text: offsets, its text, its sort, its value."""

    start: int
    end: int
    text: str
    sort: str
    """``phone``, ``year``, ``month``, ``day``, ``arabic`` or ``chinese``."""
    value: float | str
    """The number (``float``); the digits of a phone number (``str``)."""


def chinese_to_int(text: str) -> int | None:
    """The value of a Chinese numeral up to 亿 (None when it is not one).

    >>> numerals = ["三", "十五", "二十", "一百零五", "两千", "三万五千"]
    >>> [chinese_to_int(t) for t in numerals]
    [3, 15, 20, 105, 2000, 35000]
    >>> chinese_to_int("十十") is None
    True
    """
    digits = {c: i for i, c in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2}
    units = {"十": 10, "百": 100, "千": 1000}
    total = section = 0
    digit: int | None = None
    last_unit = 10**9
    for ch in text:
        if ch in digits:
            if digit is not None and digit != 0 and digits[ch] != 0:
                return None
            digit = digits[ch]
        elif ch in units:
            unit = units[ch]
            if unit >= last_unit:
                return None
            section += (1 if digit is None else digit) * unit
            digit, last_unit = None, unit
        elif ch == "万":
            total += (section + (digit or 0)) * 10_000
            section, digit, last_unit = 0, None, 10**9
        else:
            return None
    return total + section + (digit or 0)


def int_to_chinese(n: int) -> str:
    """A non-negative integer below 10**8 as a Chinese numeral.

    >>> [int_to_chinese(n) for n in [0, 3, 15, 20, 105, 2000, 35000]]
    ['零', '三', '十五', '二十', '一百零五', '二千', '三万五千']
    """
    d = "零一二三四五六七八九"
    if n < 10:
        return d[n]
    if n >= 10_000:
        high, low = divmod(n, 10_000)
        rest = "" if low == 0 else ("零" if low < 1000 else "") + int_to_chinese(low)
        return int_to_chinese(high) + "万" + rest
    out, zero = "", False
    for unit, name in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        q, n = divmod(n, unit)
        if q:
            if zero:
                out += "零"
            out += ("" if (unit == 10 and q == 1 and not out) else d[q]) + name
            zero = False
        elif out:
            zero = True
    return out


def _in_identifier(text: str, start: int, end: int, urls: list[range]) -> bool:
    before = text[start - 1] if start else ""
    after = text[end] if end < len(text) else ""
    if _IDENT.match(before) or _IDENT.match(after):
        return True
    return any(start in r for r in urls)


def _sort_of(text: str, m: re.Match[str], value: float) -> str:
    after = text[m.end() : m.end() + 1]
    before = text[m.start() - 1 : m.start()] if m.start() else ""
    if (after == "年" or len(m.group(0)) == 4) and 1000 <= value <= 2100:
        return "year"
    if after == "月" and 1 <= value <= 12 and value == int(value):
        return "month"
    if after in ("日", "号") and before == "月" and 1 <= value <= 31:
        return "day"
    return "arabic"


def number_tokens(text: str) -> list[NumberToken]:
    r"""The number tokens of a text, left to right, never overlapping.

    >>> text = "7个工作日，电话020-34121084，2021年3月5日"
    >>> [(t.text, t.sort) for t in number_tokens(text)]  # doctest: +ELLIPSIS
    [('7', 'arabic'), ('020-34121084', 'phone'), ('2021', 'year'), ('3', 'month'), ...]
    >>> [t.value for t in number_tokens("收费５０元，二十个工作日内，一次性告知")]
    [50.0, 20.0]
    >>> number_tokens("见 https://x.cn/a/123 或 B2440101\n2. 材料")
    []
    >>> [t.sort for t in number_tokens("热线12345，电话020-12333")]
    ['phone', 'phone']
    >>> text = "more than 10,000 people (5,222), 1, 2"
    >>> [(t.text, t.value) for t in number_tokens(text)]
    [('10,000', 10000.0), ('5,222', 5222.0), ('1', 1.0), ('2', 2.0)]
    """
    urls = [range(m.start(), m.end()) for m in _URL.finditer(text)]
    out: list[NumberToken] = []
    for m in _TOKEN.finditer(text):
        if _in_identifier(text, m.start(), m.end(), urls):
            continue
        raw = m.group(0)
        if _LIST_MARKER.search(text[: m.start()]) and text[m.end() : m.end() + 1] in (
            ".",
            "、",
            ")",
            "）",
        ):
            continue  # a list item's number: not a fact
        if m.lastgroup == "phone":
            digits = re.sub(r"\D", "", raw.translate(_TO_HALF))
            out.append(NumberToken(m.start(), m.end(), raw, "phone", digits))
        elif m.lastgroup == "arabic":
            value = float(raw.translate(_TO_HALF).replace(",", ""))
            out.append(
                NumberToken(m.start(), m.end(), raw, _sort_of(text, m, value), value)
            )
        else:
            n = chinese_to_int(raw)
            if n is not None:
                out.append(NumberToken(m.start(), m.end(), raw, "chinese", float(n)))
    return out


def number_values(text: str) -> set[float | str]:
    """The values of a text's number tokens (phone numbers as digit strings).

    >>> sorted(map(str, number_values("时限7(工作日)，电话020-83134173，二十日")))
    ['02083134173', '20.0', '7.0']
    """
    return {t.value for t in number_tokens(text)}


def _other_int(n: int, rng: random.Random, *, low: int = 0) -> int:
    """A plausible integer other than ``n`` (a near one when small, a scaled one)."""
    if n <= 10:
        pool = [m for m in range(max(low, n - 3), n + 6) if m != n]
    else:
        pool = sorted(
            {round(n * f) for f in (0.5, 0.6, 0.8, 1.5, 2.0, 3.0)} - {n} - {0}
        )
    return rng.choice(pool)


def plausible_other(token: NumberToken, rng: random.Random) -> str:
    """A different, plausible number of the same sort and style as ``token``.

    Phone numbers keep their layout with their last two digits changed; dates
    stay valid; full-width digits stay full-width; Chinese numerals stay Chinese.

    >>> rng = random.Random(1)
    >>> t = number_tokens("电话020-34121084")[0]
    >>> new = plausible_other(t, rng); new[:-2] == "020-341210" and new != t.text
    True
    >>> t = number_tokens("５个工作日")[0]
    >>> all("０" <= c <= "９" for c in plausible_other(t, rng))
    True
    >>> t = number_tokens("二十个工作日")[0]
    >>> plausible_other(t, rng) in {"十", "十二", "十六", "三十", "四十", "六十"}
    True
    """
    full = any(c in _FULL for c in token.text)
    if token.sort == "phone":
        tail = token.text[-2:].translate(_TO_HALF)
        other = tail
        while other == tail:
            other = f"{rng.randrange(100):02d}"
        new = token.text[:-2] + (other.translate(_TO_FULL) if full else other)
        return new
    assert isinstance(token.value, float)
    if token.sort == "chinese":
        return int_to_chinese(_other_int(int(token.value), rng, low=1))
    half = token.text.translate(_TO_HALF)
    grouped = "," in half  # 10,000: thousands separators stay
    whole, _, frac = half.replace(",", "").partition(".")
    n = int(whole)
    if token.sort == "year":
        m = n + rng.choice([-3, -2, -1, 1, 2, 3])
    elif token.sort == "month":
        m = rng.choice([x for x in range(1, 13) if x != n])
    elif token.sort == "day":
        m = rng.choice([x for x in range(1, 29) if x != n])
    else:
        m = _other_int(n, rng, low=0 if frac else 1)
    # A leading zero (an area code, ``05``) keeps the number's width.
    width = len(whole) if whole.startswith("0") else 0
    digits = f"{m:,}" if grouped else str(m).zfill(width)
    new = digits + (f".{frac}" if frac else "")
    return new.translate(_TO_FULL) if full else new
