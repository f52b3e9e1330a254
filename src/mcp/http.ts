import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';

// POST /mcp: the bot's MCP tools (packages/mcp, the same table `npx @botpay/mcp` and `botpay mcp`
// serve on stdio) over Streamable HTTP, for agents that reach the service rather than run a
// process beside it. The bearer is the bot's API key, checked like the bot API's (bots/auth.ts);
// without a valid one the answer is 401 before any MCP message is read.
//
// Stateless: each POST gets a fresh server and transport (no session id), so any instance answers
// any request and nothing is kept between them. GET (a stream for server-initiated messages,
// which a stateless server never sends) and DELETE (ending a session, of which there is none)
// are 405. A tool's calls go to this app's own bot routes through `inject` with the agent's
// Authorization header: the same hooks, validation, rate limits and idempotency as over HTTP,
// without a network hop. The MCP SDK is loaded on the first request (`serve` does not load it
// otherwise: test/foundation/lazyLoading.test.ts).

type Loaded = {
  createMcpServer: typeof import('../../packages/mcp/src/server.ts').createMcpServer;
  BotPayClient: typeof import('../../packages/client/src/index.ts').BotPayClient;
  StreamableHTTPServerTransport: typeof import('@modelcontextprotocol/sdk/server/streamableHttp.js').StreamableHTTPServerTransport;
};

async function load(): Promise<Loaded> {
  const [server, client, transport] = await Promise.all([
    import('../../packages/mcp/src/server.ts'),
    import('../../packages/client/src/index.ts'),
    import('@modelcontextprotocol/sdk/server/streamableHttp.js'),
  ]);
  return {
    createMcpServer: server.createMcpServer,
    BotPayClient: client.BotPayClient,
    StreamableHTTPServerTransport: transport.StreamableHTTPServerTransport,
  };
}

/** A fetch that answers from this app's own routes (light-my-request), as the agent's request. */
function injectFetch(app: App, request: FastifyRequest): typeof fetch {
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const headers: Record<string, string> = {};
    new Headers(init?.headers).forEach((value, name) => {
      headers[name] = value;
    });
    const res = await app.inject({
      method: (init?.method ?? 'GET') as 'GET' | 'POST',
      url: `${url.pathname}${url.search}`,
      headers,
      remoteAddress: request.ip,
      ...(typeof init?.body === 'string' ? { payload: init.body } : {}),
    });
    const answer = new Headers();
    for (const [name, value] of Object.entries(res.headers)) {
      if (value === undefined) continue;
      for (const one of Array.isArray(value) ? value : [value]) answer.append(name, String(one));
    }
    const empty = res.statusCode === 204 || res.statusCode === 304;
    return new Response(empty ? null : new Uint8Array(res.rawPayload), {
      status: res.statusCode,
      headers: answer,
    });
  };
}

const NOT_ALLOWED = JSON.stringify({
  jsonrpc: '2.0',
  error: { code: -32000, message: 'Method not allowed: this server is stateless; send requests with POST.' },
  id: null,
});

export async function registerMcpRoutes(app: App, ctx: AppContext): Promise<void> {
  let loading: Promise<Loaded> | undefined;
  // MCP's transport rules: a server validates Origin (DNS rebinding). Agents are not browsers and
  // send none; a page may reach us only from the service's own origin.
  const ownOrigin = new URL(ctx.config.baseUrl).origin;

  app.route({
    method: ['GET', 'DELETE'],
    url: '/mcp',
    schema: { hide: true },
    handler: async (_request, reply) =>
      reply.status(405).header('allow', 'POST').header('content-type', 'application/json').send(NOT_ALLOWED),
  });

  app.post('/mcp', { schema: { hide: true } }, async (request, reply) => {
    const origin = request.headers.origin;
    if (origin !== undefined && origin !== ownOrigin) {
      throw new ApiError('forbidden', `Requests from the origin ${origin} are refused here.`);
    }
    try {
      await app.botAuthenticator.authenticate(request);
    } catch (error) {
      // RFC 6750: a 401 names the scheme it wants.
      reply.header('www-authenticate', 'Bearer realm="botpay"');
      throw error;
    }
    loading ??= load();
    loading.catch(() => {
      loading = undefined;
    });
    const { createMcpServer, BotPayClient, StreamableHTTPServerTransport } = await loading;
    const client = new BotPayClient({
      baseUrl: ctx.config.baseUrl,
      apiKey: String(request.headers.authorization).slice(7).trim(),
      fetch: injectFetch(app, request),
      userAgent: 'botpay-mcp-http',
    });
    const server = createMcpServer(client);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    reply.hijack();
    reply.raw.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(request.raw, reply.raw, request.body);
  });
}
