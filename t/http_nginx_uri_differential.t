#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on what becomes of a
# request's URI: locations that proxy to one raw backend with a URI part,
# without one, with a regex location's captures ($1 and named), after a
# rewrite (in the path, and a capture in the arguments), with $request_uri
# and $uri; and locations that answer with their captures (a regex
# location's, an if's, a regex server name's). Each path is drawn at random
# (seeded; NGINX_URI_SEED replays, NGINX_URI_REQUESTS sets how many) from
# pieces: plain text, escapes of every kind (%2F, %3F, %26, %23, %25, %2B,
# %5C, %7B, UTF-8, and bytes that are not UTF-8: Latin-1, a sequence cut
# short, the four bytes of one of the code points sluice keeps such a byte
# as), dot segments, double slashes, arguments. Each goes to
# both; the status, and the target the backend got or the body, must be
# the same.
#
# Left out, as sluice.conf(5) says: bytes a URI holds only percent-encoded
# sent raw by the client (sluice passes them on encoded, nginx as sent); a
# fragment (sluice drops it); %20 or a control byte that a capture or $uri
# would put in a URI part with variables (sluice answers 400, nginx sends a
# request line that ends early).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);

my $p = 'proxy_http_version 1.1; proxy_set_header Connection "";';
my $server = <<"EOF";
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        location /api/ { proxy_pass http://127.0.0.1:BACKEND/v1/; $p }
        location /bare { proxy_pass http://127.0.0.1:BACKEND/w; $p }
        location ~ ^/re/(.*)\$ { proxy_pass http://127.0.0.1:BACKEND/r/\$1\$is_args\$args; $p }
        location ~ ^/nc/(?<rest>.*)\$ { proxy_pass http://127.0.0.1:BACKEND/n/\$rest; $p }
        location /rw/ { rewrite ^/rw/(.*)\$ /z/\$1 break; proxy_pass http://127.0.0.1:BACKEND; $p }
        location /ra/ { rewrite ^/ra/(.*)\$ /y?p=\$1 break; proxy_pass http://127.0.0.1:BACKEND; $p }
        location /ru/ { proxy_pass http://127.0.0.1:BACKEND\$request_uri; $p }
        location /uu/ { proxy_pass http://127.0.0.1:BACKEND\$uri; $p }
        location ~ ^/cap/(?<first>[^/]*)/?(.*)\$ { return 200 "cap \$1|\$2|\$first"; }
        location /if/ {
            if (\$uri ~ ^/if/(?<num>\\d+)(.*)) { return 200 "if \$num|\$1|\$2"; }
            return 200 "if none";
        }
        location ~ \\.txt\$ { return 200 "txt \$1"; }
    }
    server {
        listen 127.0.0.1:PORT;
        server_name ~^(?<sub>[a-z]+)\\.(example|test)\$;
        location / { return 200 "sub \$sub|\$1|\$2"; }
    }
EOF
nginx_beside($t, $server);

my $seed = $ENV{NGINX_URI_SEED} // int(rand(1 << 31));
srand($seed);
my $count = $ENV{NGINX_URI_REQUESTS} // 400;

sub pick { $_[int(rand(@_))] }

my @prefix = qw{/api/ /bare /re/ /nc/ /rw/ /ra/ /ru/ /uu/ /cap/ /if/ /x.txt/};
# Pieces of a path; escapes that decode to a space or a control byte only
# where no variable puts them in a URI part.
my @piece = ('a', 'b1', '/', '//', '.', '..', '%2e', '%2E%2e', '%2F', '%2f', '%3F', '%26',
	'%23', '%25', '%2B', '+', '%5C', '%7B', '%7c', '%41', '%C3%A9', '~', '%7E', ';', '&',
	'!', '$', "'", '(', ')', '*', ',', '=', '@', ':', '[', ']', '_', '-', '12', '%22', '%3C',
	'%3e', '%60', '%5E', '%E9', '%e9%FF', '%C3', '%C3%A9%C3', '%F4%8F%BF%A9', '%80');

sub target {
	my $pre = pick(@prefix);
	my $path = $pre . join('', map { pick(@piece) } 1 .. int(rand(5)));
	$path .= '.txt' if $pre eq '/x.txt/' && rand() < 0.5;
	if ($pre =~ m{^/(?:api|bare|rw|ru)} && rand() < 0.2) {
		$path .= pick('%20', '%09', '%00');
	}
	$path .= '?' . pick('x=1', 'x=%20&y', 'a=b&c', '', 'q=%26') if rand() < 0.3;
	return $path;
}

# What one server did with $path: "STATUS|body or what the backend got".
sub outcome {
	my ($port, $n, $path, $host) = @_;
	my $buf = http("GET $path HTTP/1.1\r\nHost: $host\r\nX-N: $n\r\nConnection: close\r\n\r\n",
		raw => 1, PeerAddr => "127.0.0.1:$port", timeout => 4) // '';
	my ($code) = $buf =~ /^HTTP\/1\.1 (\d{3})/;
	return 'none' unless defined $code;
	my @got = map { /^\S+ (\S+)/ ? $1 : '?' } grep { /^X-N: $n\r$/m }
		$t->raw_requests(port(8082));
	return "$code|backend " . ($got[-1] // '') if @got && $got[-1] ne '';
	my ($body) = $buf =~ /\r\n\r\n(.*)\z/s;
	return "$code|" . ($code == 200 ? $body // '' : '');
}

my (@diffs, $same);
my $n = 0;
for (1 .. $count) {
	my $host = rand() < 0.15 ? pick('abc.example', 'x.test', 'Q.example', 'a1.example')
		: 'localhost';
	my $path = $host eq 'localhost' ? target() : pick('/', '/z', '/%41?x');
	$n++;
	my $ref = outcome(port(8081), $n, $path, $host);
	$n++;
	my $ours = outcome(port(8080), $n, $path, $host);
	if ($ref eq $ours) {
		$same++;
	} else {
		push @diffs, "$host $path: nginx [$ref], sluice [$ours]";
	}
}

is(scalar(@diffs), 0, "$count URIs (seed $seed): sluice makes of them what nginx does ("
	. ($same // 0) . ' the same)')
	or diag(join("\n", @diffs[0 .. ($#diffs < 14 ? $#diffs : 14)]));
