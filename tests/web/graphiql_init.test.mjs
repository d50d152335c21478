// GraphiQL's start-up script (src/graphiql/init.js), run with stand-ins for
// the libraries it drives: the Headers tab's Authorization reaches the
// websocket's connection_init whether or not headers are persisted, and a
// changed token opens a new socket that sends it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import vm from 'node:vm';

const source = readFileSync(new URL('../../src/graphiql/init.js', import.meta.url), 'utf8');

function start() {
  const seen = { terminated: 0 };
  const sandbox = {
    window: { location: { href: 'http://127.0.0.1:8080/' }, localStorage: { getItem: () => null } },
    URL,
    graphqlWs: {
      createClient(options) {
        seen.connectionParams = options.connectionParams;
        return { terminate() { seen.terminated += 1; } };
      },
    },
    GraphiQL: {
      createFetcher(options) {
        seen.fetcherOptions = options;
        return (params, opts) => ({ params, opts });
      },
    },
    React: { createElement: (_component, props) => { seen.props = props; return {}; } },
    ReactDOM: { createRoot: () => ({ render() {} }) },
    document: { getElementById: () => ({}) },
  };
  vm.runInNewContext(source, sandbox);
  return seen;
}

test('the Headers tab reaches connection_init without persisted headers', () => {
  const seen = start();
  assert.equal(seen.fetcherOptions.url, 'http://127.0.0.1:8080/graphql');
  assert.deepEqual({ ...seen.connectionParams() }, {});
  // GraphiQL hands the tab's headers (a JSON string) with each operation.
  seen.props.fetcher({ query: 'subscription { events { cursor } }' }, {
    headers: '{"Authorization": "Bearer first"}',
  });
  assert.deepEqual({ ...seen.connectionParams() }, { authorization: 'Bearer first' });
  // A new token: the socket is replaced, and the next one sends it.
  const before = seen.terminated;
  seen.props.fetcher({ query: '{ viewer { id } }' }, { headers: { authorization: 'Bearer second' } });
  assert.ok(seen.terminated > before);
  assert.deepEqual({ ...seen.connectionParams() }, { authorization: 'Bearer second' });
  // The same token again: the socket stays.
  const now = seen.terminated;
  seen.props.fetcher({ query: '{ viewer { id } }' }, { headers: { authorization: 'Bearer second' } });
  assert.equal(seen.terminated, now);
});
