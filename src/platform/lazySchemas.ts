// Route schemas compiled on a route's first use instead of at start-up.
//
// Fastify compiles every route's validators (Ajv) and response serializers (fast-json-stringify)
// while the app gets ready: for this service's ~200 routes that was about half a second of every
// start and restart, spent on routes most instances never answer (the dashboard's on an API-only
// instance, an owner's on a bot-facing one). Here each compiled function is made on its first
// call: a route's first request pays its own compilation (a millisecond or two), start-up pays
// none. `compileAll` makes every pending one at once (tests check that every schema compiles).

/** What Fastify passes a compiler: the schema and where it belongs. */
type Route = Record<string, unknown>;
/** Any compiler factory: (externalSchemas, options) => (route) => compiled function. */
type CompilerFactory = (...args: never[]) => (route: never) => unknown;

export interface LazySchemas {
  /** Fastify's validator factory, made lazy (schemaController.compilersFactory.buildValidator). */
  validators<F extends CompilerFactory>(factory: F): F;
  /** Fastify's serializer factory, made lazy (schemaController.compilersFactory.buildSerializer). */
  serializers<F extends CompilerFactory>(factory: F): F;
  /** Compiles every schema not compiled yet; returns how many there were. Throws the first failure. */
  compileAll(): number;
}

export function lazySchemas(): LazySchemas {
  const pending = new Set<() => unknown>();

  /** `make`'s result, made on the first call and kept; pending until then (compileAll). */
  function once<T>(make: () => unknown): () => T {
    let real: T | undefined;
    const get = () => {
      if (real === undefined) {
        real = make() as T;
        pending.delete(get);
      }
      return real;
    };
    pending.add(get);
    return get;
  }

  // Ajv's function is called as validate(data[, dataCxt]) and read for `errors` after a false
  // answer; Fastify passes dataCxt when the function has `schemaEnv` (Ajv may then replace a
  // coerced root value), so that property compiles and forwards too.
  function lazyValidator(make: () => unknown) {
    const get = once<((data: unknown, cxt?: unknown) => unknown) & Record<string, unknown>>(make);
    const validate = (data: unknown, cxt?: unknown) => (cxt === undefined ? get()(data) : get()(data, cxt));
    Object.defineProperties(validate, {
      errors: { get: () => get().errors },
      schemaEnv: { get: () => get().schemaEnv },
    });
    return validate;
  }

  function lazySerializer(make: () => unknown) {
    const get = once<(payload: unknown) => string>(make);
    return (payload: unknown) => get()(payload);
  }

  const lazyFactory =
    (wrap: (make: () => unknown) => unknown) =>
    <F extends CompilerFactory>(factory: F): F =>
      ((...args: never[]) => {
        const compile = factory(...args);
        return (route: Route) => wrap(() => compile(route as never));
      }) as unknown as F;

  return {
    validators: lazyFactory(lazyValidator),
    serializers: lazyFactory(lazySerializer),
    compileAll() {
      const all = [...pending];
      for (const make of all) make();
      return all.length;
    },
  };
}
