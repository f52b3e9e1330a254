import { validationError } from './errors.ts';

// Text someone typed that the service shows to someone else: bot names and descriptions, card
// labels, owner token names, top-up reasons and notes. They reach the dashboard, e-mail subjects
// and bodies and the audit log, so each is one plain, visible line (docs/api.md, "Names"):
// - a NUL or an unpaired surrogate is refused (400 validation_error naming the field): neither can
//   be stored or shown;
// - line breaks and other control characters become spaces (a name cannot add lines or headers to
//   a mail);
// - invisible format characters are removed: bidi controls (U+202A–U+202E, U+2066–U+2069, LRM, RLM,
//   ALM), zero-width characters (U+200B, U+200C, U+2060, U+FEFF), soft hyphens and the other
//   Unicode "Cf" characters, so a name cannot reorder what is shown after it or pass for another
//   name that looks the same; a zero-width joiner is kept only inside an emoji sequence (👩‍👩‍👧);
// - runs of spaces become one, the ends are trimmed, and the result is NFC.

/** A zero-width joiner outside an emoji sequence, or any other format character (Cf). */
const INVISIBLE =
  /\u200D(?!\p{Extended_Pictographic})|(?<!\p{Extended_Pictographic}\uFE0F?)\u200D|(?!\u200D)\p{Cf}/gu;

/** The text as one plain, visible line (see above); may be empty. Never refuses. */
export function plainText(value: string): string {
  return value
    .normalize('NFC')
    .replace(/[\p{Cc}\p{Zl}\p{Zp}]/gu, ' ')
    .replace(INVISIBLE, '')
    .replace(/\s{2,}/gu, ' ')
    .trim();
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** True when the text holds a character no field can store or show: NUL, an unpaired surrogate. */
export function hasUnstorableCharacter(value: string): boolean {
  return value.includes('\u0000') || LONE_SURROGATE.test(value);
}

/**
 * A display name or line of text for `field`: refused (400 validation_error) when it holds NUL or
 * an unpaired surrogate, or when the cleaned text is empty or longer than `max` characters.
 */
export function displayText(value: string, field: string, max: number): string {
  if (hasUnstorableCharacter(value)) {
    throw validationError(
      `${field} contains a character that cannot be stored (NUL or an unpaired surrogate)`,
      {
        field,
      },
    );
  }
  const text = plainText(value);
  if (text.length === 0 || text.length > max) {
    throw validationError(`${field} must be 1 to ${max} characters of visible text`, { field });
  }
  return text;
}

/** As displayText, for an optional field: what cleans to nothing is null. */
export function optionalDisplayText(value: string | undefined, field: string, max: number): string | null {
  if (value === undefined) return null;
  if (hasUnstorableCharacter(value)) return displayText(value, field, max);
  const text = plainText(value);
  return text.length === 0 ? null : displayText(text, field, max);
}
