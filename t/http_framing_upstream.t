#!/usr/bin/perl

# HTTP/1 response framing from an upstream, as passed on to the client: a 204
# or 304 never has a body whatever the upstream sends, a response delimited
# by the upstream closing reaches the client whole (chunked to an HTTP/1.1
# client, whose connection goes on), 1xx before the final response are
# skipped, and chunked responses with extensions and trailers arrive intact.
# Each case checks the client's response, that the next request on the same
# client connection gets its own answer, and whether the upstream connection
# was kept (only when what it sent was framed). With proxy_buffering on and
# off. What t/hostile_upstream.t covers (conflicting or invalid lengths and
# codings, bad status lines, truncated bodies, 100 then 200, 101, huge heads)
# is not repeated here.
#
# Checked against nginx 1.22.1 (SLUICE_BINARY=/usr/sbin/nginx); the comment
# by each case says what it does. 

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Wire qw/exchange/;

my $t = Test::Sluice->new()->has(qw/http proxy upstream_keepalive/)->plan(154);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    # One idle connection at most: a request after another goes on the
    # connection the first left, if it was kept.
    upstream u { server 127.0.0.1:%%PORT_8081%%; keepalive 1; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location / { proxy_pass http://u; }
        location /nobuf/ { proxy_pass http://u/; proxy_buffering off; }
    }
}

EOF

my $whole = 'whole body until close';
$t->raw_backend(port(8081),
	'/204-body' => "HTTP/1.1 204 No Content\r\nContent-Length: 8\r\n\r\nPOISONED",
	'/204-chunked' => "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"
		. "8\r\nPOISONED\r\n0\r\n\r\n",
	'/204' => "HTTP/1.1 204 No Content\r\n\r\n",
	'/304-body' => "HTTP/1.1 304 Not Modified\r\nContent-Length: 8\r\n\r\nPOISONED",
	'/304-length' => "HTTP/1.1 304 Not Modified\r\nContent-Length: 8\r\nETag: \"e\"\r\n\r\n",
	'/10-close' => { send => "HTTP/1.0 200 OK\r\nX-A: b\r\n\r\n$whole", close => 1 },
	'/11-close' => { send => "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n$whole", close => 1 },
	'/103' => "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
		. "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfinal!",
	'/1xx' => "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
		. "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfinal!",
	'/trailers' => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n"
		. "5\r\nhello\r\n6\r\n world\r\n0\r\nX-T: t\r\nX-U: u\r\n\r\n",
	'/chunk-ext' => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		. "5;e=1\r\nhello\r\n6;f=\"x y\"\r\n world\r\n0\r\n\r\n",
	'/head' => "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
	'/good' => "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood",
);
$t->run();

my $H = "Host: localhost\r\n";

# The upstream connection that served the last request for $uri.
sub conn_of {
	my ($uri) = @_;
	my @l = grep { $_->[2] eq $uri } $t->raw_log(port(8081));
	return @l ? $l[-1][0] : -1;
}

# GET (or $o{method}) $path, then GET /good, in one write on one HTTP/1.1
# connection. Checks the first response's status (and body, when $o{body} is
# defined; none for a 204 or 304), that nothing the upstream should not
# have sent arrived, that /good got its own answer on the connection still
# open, and that the upstream connection was kept ($o{reused} 1) or not (0).
sub pair {
	my ($name, $path, $status, %o) = @_;
	my %todo = %{$o{todo} // {}};
	my $method = $o{method} // 'GET';
	my $r = exchange(port => port(8080), responses => 2, methods => [$method, 'GET'],
		send => ["$method $path HTTP/1.1\r\n${H}\r\nGET /good HTTP/1.1\r\n${H}\r\n"]);
	my ($first, $next) = @{$r->{responses}};
	$first //= { status => 0, h => {}, body => '', line => '' };
	TODO: {
		local $TODO = $todo{status};
		like($first->{line}, qr/^HTTP\/1.1 $status /, "$name: HTTP/1.1 $status");
	}
	if (defined $o{body}) {
		is($first->{body}, $o{body}, "$name: the body");
		TODO: {
			local $TODO = $todo{framing};
			is($first->{framing}, $o{framing}, "$name: $o{framing}") if $o{framing};
		}
	}
	unlike($r->{raw}, qr/POISONED/, "$name: nothing of a body it must not have");
	TODO: {
		local $TODO = $todo{next};
		is($next && $next->{body}, 'good', "$name: the next request gets its own answer");
		ok(!$r->{closed}, "$name: connection kept");
	}
	if (defined $o{reused}) {
		TODO: {
			local $TODO = $todo{reused};
			my ($a, $b) = (conn_of($o{upath} // $path), conn_of('/good'));
			$o{reused} ? is($b, $a, "$name: upstream connection kept")
				: isnt($b, $a, "$name: upstream connection not kept");
		}
	}
	return ($first, $r);
}

for my $p ('', '/nobuf') {
	my $k = $p ? ' (proxy_buffering off)' : '';

	# nginx: the 204 and 304 go out without a body ([warn] "upstream sent
	# more data than specified in "Content-Length" header"); the upstream
	# connection is closed when the upstream sent one, kept otherwise.
	# nginx 1.22 also passes the upstream's Content-Length on a 204, which
	# sluice does not; neither is checked.
	pair("204 with a body$k", "$p/204-body", 204, body => '', reused => 0, upath => '/204-body');
	pair("204 chunked$k", "$p/204-chunked", 204, body => '', reused => 0,
		upath => '/204-chunked');
	pair("204$k", "$p/204", 204, body => '', reused => 1, upath => '/204');
	pair("304 with a body$k", "$p/304-body", 304, body => '', reused => 0, upath => '/304-body');
	my ($r) = pair("304 with Content-Length and no body$k", "$p/304-length", 304, body => '',
		reused => 1, upath => '/304-length');
	is($r->{h}{etag}, '"e"', "304 with Content-Length and no body$k: its headers");

	# nginx: a body the upstream ends by closing reaches an HTTP/1.1 client
	# whole, chunked (or with a length, when buffered whole first), and the
	# client connection goes on; the status line is HTTP/1.1 whatever the
	# upstream's.
	for my $c (['HTTP/1.0 without a length', '/10-close'],
		['Connection: close without a length', '/11-close'])
	{
		pair("$c->[0]$k", "$p$c->[1]", 200, body => $whole,
			$p ? (framing => 'chunked') : ());
	}

	# nginx: to an HTTP/1.0 client the same goes out close-delimited.
	{
		my $r = exchange(port => port(8080), send => ["GET $p/10-close HTTP/1.0\r\n${H}\r\n"]);
		my $first = $r->{responses}[0] // { line => '', body => '' };
		like($first->{line}, qr/^HTTP\/1.1 200 /, "HTTP/1.0 without a length, to HTTP/1.0$k: 200");
		is($first->{body}, $whole, "HTTP/1.0 without a length, to HTTP/1.0$k: the body");
		# An HTTP/1.0 client does not read chunks (nginx's chunked filter
		# is for HTTP/1.1 only).
		like($first->{framing} // '', qr/^(?:length|close)\z/,
			"HTTP/1.0 without a length, to HTTP/1.0$k: not chunked");
		ok($r->{closed}, "HTTP/1.0 without a length, to HTTP/1.0$k: connection closed");
	}

	# 1xx before the final response: skipped, the final response passed on,
	# the upstream connection kept. nginx 1.22 gets this wrong: it takes the
	# 1xx for the final response and waits for its body until the upstream
	# closes (newer nginx skips 1xx, and passes 103 with early_hints).
	pair("103 then 200$k", "$p/103", 200, body => 'final!', reused => 1, upath => '/103');
	pair("102, 103, 100 then 200$k", "$p/1xx", 200, body => 'final!', reused => 1,
		upath => '/1xx');

	# nginx: a chunked body with trailers or extensions arrives whole and
	# the upstream connection is kept (nginx drops the trailers; sluice
	# passes them on: t/proxy_trailers.t).
	pair("chunked with trailers$k", "$p/trailers", 200, body => 'hello world', reused => 1,
		upath => '/trailers');
	pair("chunk extensions$k", "$p/chunk-ext", 200, body => 'hello world', reused => 1,
		upath => '/chunk-ext');

	# nginx: HEAD gets the upstream's Content-Length and no body; the upstream
	# connection is kept.
	($r) = pair("HEAD$k", "$p/head", 200, method => 'HEAD', body => '', reused => 1,
		upath => '/head');
	is($r->{h}{'content-length'}, 1000, "HEAD$k: the upstream's Content-Length");
}
